//! JSON as the library reads it: one canonical form with exact numbers
//! (object keys sorted, no whitespace), and RFC 6901 pointers into it.
//!
//! Request fingerprints hash the canonical form, and the event path reads
//! keys and validated fields from it, so both agree on when two documents
//! are the same.

mod canonical;
mod decimal;
mod pointer;

pub(crate) use self::canonical::canonical_json;
// Only the HTTP layer's body keys and the SQS and Kinesis payloads tell a
// payload too deep from one that is not JSON.
#[cfg(any(feature = "http", feature = "sqs", feature = "kinesis"))]
pub(crate) use self::canonical::{nesting_depth, MAX_DEPTH};
pub(crate) use self::pointer::{check_pointer, select};
// Only the event batches read one document at several pointers.
#[cfg(any(
    feature = "sqs",
    feature = "kinesis",
    feature = "events-dynamodb-stream"
))]
pub(crate) use self::pointer::document::CanonicalJson;

/// `{"id":"k1","deep":[[…1…]]}` with `deep` nesting `depth - 1` arrays, so
/// the document nests `depth` levels: the body-key tests' input either side
/// of [`MAX_DEPTH`].
#[cfg(all(test, any(feature = "http", feature = "sqs", feature = "kinesis")))]
pub(crate) fn nested_for_tests(depth: usize) -> String {
    format!(
        r#"{{"id":"k1","deep":{}1{}}}"#,
        "[".repeat(depth - 1),
        "]".repeat(depth - 1)
    )
}
