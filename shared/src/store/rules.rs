//! The rules every store shares (docs/DESIGN.md section 4, and the rules
//! listed on [`Store`](super::Store)): when a claim may take a record over,
//! when a record is a claim's or a completion's own write coming back, and
//! how a response is fitted to a store's item limit. The stores that
//! evaluate a rule in Rust (the in-memory store, the conditions DynamoDB is
//! sent after a refused write, the rows PostgreSQL returns) call these; the
//! Lua scripts and SQL statements state the same rules in their own terms.

use super::{ClaimRequest, Completion, Lease};
use crate::error::{Error, ErrorKind};
use crate::record::{Record, StoredResponse};

/// May `request` take over `existing`: an abandoned attempt (in progress,
/// lease over) of the same request (same fingerprint) in the same life (not
/// expired)? Only a takeover inherits the recovery point.
pub(crate) fn may_take_over(existing: &Record, request: &ClaimRequest) -> bool {
    existing.status == crate::record::Status::InProgress
        && existing.lease_expires_at_ms < request.now_ms
        && existing.fingerprint == request.fingerprint
        && existing.expires_at_s >= request.now_ms / 1000
}

/// Is `record` completed by `lease` itself? A completion that finds this is
/// its own write coming back (an SDK retry after a lost response), not fenced.
pub(crate) fn completed_by(record: &Record, lease: &Lease) -> bool {
    record.status == crate::record::Status::Completed
        && record.attempt == lease.attempt
        && record.owner == lease.owner
}

/// A response as it will be stored within a store's limit: the response (the
/// original, or the too-large marker) with its body encoded once.
#[cfg_attr(not(any(feature = "dynamodb", feature = "redis")), allow(dead_code))]
pub(crate) struct Fitted<'a> {
    /// What is stored.
    pub(crate) response: std::borrow::Cow<'a, StoredResponse>,
    /// Its body as stored (compressed when that helped).
    pub(crate) body: std::borrow::Cow<'a, [u8]>,
    /// Whether `body` is gzip-compressed.
    pub(crate) gzip: bool,
    pub(crate) completion: Completion,
}

/// The response as it will be stored within `limit` bytes: the original, or
/// the too-large marker when it does not fit even compressed, or its body is
/// over [`MAX_BODY_BYTES`](crate::record::MAX_BODY_BYTES) uncompressed. The
/// body is compressed here, once.
pub(crate) fn fit(response: &StoredResponse, limit: usize) -> Fitted<'_> {
    use crate::record::{encode_body, stored_len, too_large_marker, MAX_BODY_BYTES, RECORD_BYTES};
    use std::borrow::Cow;
    let raw = response.body.bytes();
    let (body, gzip) = encode_body(raw, RECORD_BYTES + stored_len(response, &[]));
    let bytes = stored_len(response, &body);
    if bytes <= limit && raw.len() <= MAX_BODY_BYTES {
        return Fitted {
            response: Cow::Borrowed(response),
            body,
            gzip,
            completion: Completion::Stored,
        };
    }
    tracing::warn!(
        bytes,
        body_bytes = raw.len(),
        limit,
        "response too large to store; the record completes with a problem marker"
    );
    let marker = too_large_marker(response.status, bytes);
    let (body, gzip) = encode_body(marker.body.bytes(), RECORD_BYTES + stored_len(&marker, &[]));
    let body = Cow::Owned(body.into_owned());
    Fitted {
        response: Cow::Owned(marker),
        body,
        gzip,
        completion: Completion::Oversized { bytes },
    }
}

/// When a release that keeps a recovery point (rule 4) ends the lease: a
/// millisecond ago, so a retry on this clock in this same millisecond may
/// already take the record over (a takeover needs the lease to have ended
/// strictly before its own clock).
pub(crate) fn lease_ended_at() -> u64 {
    crate::clock::now_ms().saturating_sub(1)
}

/// The claim rule, shared by every implementation that evaluates it itself:
/// may `request` claim over `existing`?
pub(crate) fn claimable(existing: &Record, request: &ClaimRequest) -> bool {
    existing.expires_at_s < request.now_ms / 1000 || may_take_over(existing, request)
}

/// Rule 3: the record is in progress under our own owner token, so an earlier
/// try of this same claim succeeded.
pub(crate) fn own_claim(existing: &Record, request: &ClaimRequest) -> Option<Lease> {
    (existing.status == crate::record::Status::InProgress && existing.owner == request.owner).then(
        || Lease {
            record_id: existing.id.clone(),
            owner: existing.owner.clone(),
            fingerprint: existing.fingerprint.clone(),
            attempt: existing.attempt,
            recovered: existing.checkpoint.clone(),
        },
    )
}

/// A claim that found the record changed under it three times in a row
/// (each retry saw another writer win) gives up: the client retries later.
#[cfg_attr(not(any(feature = "dynamodb", feature = "postgres")), allow(dead_code))]
pub(crate) fn claim_contended(record_id: &str) -> Error {
    Error::new(
        ErrorKind::StoreUnavailable,
        format!("record {record_id} changed under three claims in a row; retry the request"),
    )
}

/// What [`corrupt`] says of a record whose attempt count has no successor
/// its engine can store: no takeover or new life can fence it (a completed
/// record still replays). Only a damaged record, or another tool's, counts
/// that far; `lambda-idempotency release`, or the record's expiry, removes
/// it.
#[cfg_attr(
    not(any(feature = "dynamodb", feature = "redis", feature = "postgres")),
    allow(dead_code)
)]
pub(crate) const ATTEMPT_EXHAUSTED: &str =
    "its attempt count is too large to hand out the next fencing token";

/// A record its engine cannot read back: `what` is wrong with record
/// `record_id`'s stored form, which the engine calls `stored_as` (a DynamoDB
/// "item", a Redis "key", a PostgreSQL "row"). The stores write nothing this
/// reports, so the message asks whether something else wrote there.
#[cfg_attr(
    not(any(feature = "dynamodb", feature = "redis", feature = "postgres")),
    allow(dead_code)
)]
pub(crate) fn corrupt(stored_as: &str, record_id: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::CorruptRecord,
        format!(
            "idempotency record {record_id} cannot be read: {what}; was the {stored_as} \
             written by something other than lambda-idempotency?"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{StoredBody, MAX_BODY_BYTES};
    use crate::store::DEFAULT_MAX_RESPONSE_BYTES;

    #[test]
    fn a_body_over_the_cap_is_not_stored_even_if_it_compresses_well() {
        let at_cap = StoredResponse::new(200, vec![], StoredBody::Binary(vec![0; MAX_BODY_BYTES]));
        assert_eq!(
            fit(&at_cap, DEFAULT_MAX_RESPONSE_BYTES).completion,
            Completion::Stored
        );
        let over =
            StoredResponse::new(200, vec![], StoredBody::Binary(vec![0; MAX_BODY_BYTES + 1]));
        let fitted = fit(&over, DEFAULT_MAX_RESPONSE_BYTES);
        assert!(matches!(fitted.completion, Completion::Oversized { .. }));
        assert_eq!(
            fitted.response.status,
            crate::problem::RESPONSE_TOO_LARGE.status
        );
    }
}
