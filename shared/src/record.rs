//! The idempotency record and its state machine.

#[cfg(feature = "http")]
use lambda_http::Body;

/// Where a record is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Claimed by an invocation that has not finished (or crashed).
    InProgress,
    /// The outcome is stored and replays.
    Completed,
}

impl Status {
    /// The value stored in the `status` attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "IN_PROGRESS",
            Status::Completed => "COMPLETED",
        }
    }

    /// Parse the stored value.
    pub fn parse(s: &str) -> Option<Status> {
        match s {
            "IN_PROGRESS" => Some(Status::InProgress),
            "COMPLETED" => Some(Status::Completed),
            _ => None,
        }
    }
}

/// The idempotency record and its state machine.
///
/// One record per scoped key. It is born `InProgress` by a claim, becomes
/// `Completed` when the handler's outcome is stored, or disappears when the
/// outcome is released (so a retry runs again). Every claim increments
/// [`Record::attempt`], the fencing token: a write made on behalf of an older
/// attempt is rejected.
///
/// ```text
///            claim                      complete (fenced)
///  absent ─────────────▶ IN_PROGRESS ─────────────────────▶ COMPLETED
///    ▲                     │   ▲  lease expired:                │
///    └── release (fenced) ─┘   └─ takeover, attempt + 1         │
///    ▲                                                          │
///    └────────────── expires_at passed (TTL) ───────────────────┘
/// ```
///
/// ```
/// use lambda_idempotency::store::{StoredBody, StoredResponse};
///
/// let stored = StoredResponse::new(201, vec![("content-type".into(), b"application/json".to_vec())],
///                                  StoredBody::Text("{\"id\":1}".into()));
/// let response = stored.to_http();
/// assert_eq!(response.status(), 201);
/// assert_eq!(response.headers()["content-type"], "application/json");
/// ```
///
/// A stored record, as a lost claim sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Hash of the scope (tenant, method, path, key): the partition key.
    pub id: String,
    /// In progress or completed.
    pub status: Status,
    /// Fingerprint of the request that claimed the record.
    pub fingerprint: String,
    /// Fencing token: incremented by every claim.
    pub attempt: u64,
    /// Random token of the invocation holding (or last holding) the lease.
    pub owner: String,
    /// When the current lease ends, epoch milliseconds.
    pub lease_expires_at_ms: u64,
    /// When the record expires (the TTL attribute), epoch seconds.
    pub expires_at_s: u64,
    /// The stored outcome; present when completed.
    pub response: Option<StoredResponse>,
    /// The last recovery point committed, if any.
    pub checkpoint: Option<Checkpoint>,
}

/// A recovery point: a named step a handler finished, with small data to
/// resume from. Written fenced by `attempt`; kept across takeovers within one
/// life of the record, dropped when the record completes, is released, or
/// expires (the claim that starts the next life removes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The step's name (for example `charged`).
    pub name: String,
    /// What the next step needs (for example the charge id).
    pub data: serde_json::Value,
    /// The attempt that committed it.
    pub attempt: u64,
}

impl Checkpoint {
    /// The recovery point as the Redis and PostgreSQL stores keep it: JSON
    /// text of `{"name", "data", "attempt"}`.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn to_json(&self) -> String {
        serde_json::json!({
            "name": self.name,
            "data": self.data,
            "attempt": self.attempt,
        })
        .to_string()
    }
}

/// A response as stored: status, headers and body, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status code.
    pub status: u16,
    /// Header names (lower case) and raw values, in order; repeated names allowed.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, keeping the text/binary distinction `lambda_http` makes (it
    /// decides whether API Gateway receives the body base64-encoded).
    pub body: StoredBody,
}

/// A stored body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredBody {
    /// No body.
    Empty,
    /// A UTF-8 body.
    Text(String),
    /// Arbitrary bytes.
    Binary(Vec<u8>),
}

impl StoredBody {
    /// A copy of an HTTP body.
    #[cfg(feature = "http")]
    pub(crate) fn of_http(body: &Body) -> StoredBody {
        match body {
            Body::Empty => StoredBody::Empty,
            Body::Text(s) => StoredBody::Text(s.clone()),
            Body::Binary(b) => StoredBody::Binary(b.clone()),
            // `Body` is non-exhaustive; anything new is kept as its bytes.
            other => StoredBody::Binary(other.as_ref().to_vec()),
        }
    }

    /// The tag stored beside the body bytes.
    pub fn kind(&self) -> &'static str {
        match self {
            StoredBody::Empty => "empty",
            StoredBody::Text(_) => "text",
            StoredBody::Binary(_) => "binary",
        }
    }

    /// The body bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            StoredBody::Empty => &[],
            StoredBody::Text(s) => s.as_bytes(),
            StoredBody::Binary(b) => b,
        }
    }

    /// Rebuild from the tag and bytes; `None` when the tag is unknown or a text
    /// body is not UTF-8.
    pub fn from_parts(kind: &str, bytes: Vec<u8>) -> Option<StoredBody> {
        match kind {
            "empty" => Some(StoredBody::Empty),
            "text" => String::from_utf8(bytes).ok().map(StoredBody::Text),
            "binary" => Some(StoredBody::Binary(bytes)),
            _ => None,
        }
    }
}

/// The most header fields a replay rebuilds. A handler's response cannot
/// hold more names than `http`'s map (24,576), and no front door of Lambda
/// delivers a response with anywhere near this many; a stored response with
/// more came from a foreign writer or damage. The rest are dropped, which
/// leaves room for `Idempotent-Replayed` (`http` panics past its limit).
#[cfg(feature = "http")]
const MAX_REPLAYED_HEADERS: usize = 10_000;

impl StoredResponse {
    /// Whether this is a problem response of `kind` (its `type` URI), such
    /// as the markers a record holds in place of a handler's outcome.
    pub(crate) fn is_problem(&self, kind: crate::problem::ProblemType) -> bool {
        serde_json::from_slice::<serde_json::Value>(self.body.bytes())
            .is_ok_and(|v| v["type"] == kind.uri)
    }

    /// Build a stored response.
    pub fn new(status: u16, headers: Vec<(String, Vec<u8>)>, body: StoredBody) -> Self {
        StoredResponse {
            status,
            headers,
            body,
        }
    }

    /// A problem document of `kind` with a `detail` sentence, stored as
    /// [`crate::problem::response`] would answer it.
    pub(crate) fn problem(kind: crate::problem::ProblemType, detail: &str) -> Self {
        StoredResponse::new(
            kind.status,
            vec![(
                "content-type".to_owned(),
                crate::problem::CONTENT_TYPE.as_bytes().to_vec(),
            )],
            StoredBody::Text(crate::problem::document(kind, detail)),
        )
    }

    /// Capture a handler's response.
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn from_http(response: &http::Response<Body>) -> Self {
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect();
        StoredResponse {
            status: response.status().as_u16(),
            headers,
            body: StoredBody::of_http(response.body()),
        }
    }

    /// Rebuild the HTTP response. Headers that are no longer valid (they were
    /// valid when stored, so only a foreign writer produces them) are skipped,
    /// and so are any past the first 10,000; an invalid status becomes 500.
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn to_http(&self) -> http::Response<Body> {
        let mut response = http::Response::new(match &self.body {
            StoredBody::Empty => Body::Empty,
            StoredBody::Text(s) => Body::Text(s.clone()),
            StoredBody::Binary(b) => Body::Binary(b.clone()),
        });
        *response.status_mut() = http::StatusCode::from_u16(self.status)
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        if self.headers.len() > MAX_REPLAYED_HEADERS {
            tracing::warn!(
                stored = self.headers.len(),
                kept = MAX_REPLAYED_HEADERS,
                "a stored response has more header fields than a replay carries; the rest are dropped"
            );
        }
        let headers = response.headers_mut();
        for (name, value) in self.headers.iter().take(MAX_REPLAYED_HEADERS) {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_bytes(value),
            ) {
                headers.append(name, value);
            }
        }
        response
    }
}

#[cfg(test)]
thread_local! {
    /// How many bodies this thread compressed, for tests of the write path.
    pub(crate) static COMPRESSIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// DynamoDB bills a write per started kilobyte of the item.
pub const WRITE_UNIT_BYTES: usize = 1024;

/// What a completed record takes in the store besides its response: its id,
/// status, attempt, owner, fingerprint, lease and expiry, names included
/// (about 280 bytes as DynamoDB sizes items).
pub(crate) const RECORD_BYTES: usize = 280;

thread_local! {
    /// One gzip compressor per thread, built once: building one zeroes its
    /// match tables, which costs more than compressing a response of a few
    /// kilobytes. Level 1 compresses typical JSON as small as `flate2`'s
    /// fast level did, in a fraction of the instructions.
    static COMPRESSOR: std::cell::RefCell<libdeflater::Compressor> = std::cell::RefCell::new(
        libdeflater::Compressor::new(libdeflater::CompressionLvl::new(1).unwrap_or_default()),
    );
    /// One decompressor per thread, for the same reason.
    static DECOMPRESSOR: std::cell::RefCell<libdeflater::Decompressor> =
        std::cell::RefCell::new(libdeflater::Decompressor::new());
}

/// The body bytes as stored, and whether they are gzip-compressed. A body is
/// compressed only where that saves a write unit: when the record (`others`
/// bytes besides the body) would span more than one kilobyte and the
/// compressed body makes it span fewer. Below that, compression would cost
/// CPU on every completion and replay and save nothing.
pub(crate) fn encode_body(body: &[u8], others: usize) -> (std::borrow::Cow<'_, [u8]>, bool) {
    let units = |len: usize| (len + others).div_ceil(WRITE_UNIT_BYTES);
    if units(body.len()) > 1 {
        #[cfg(test)]
        COMPRESSIONS.with(|n| n.set(n.get() + 1));
        let compressed = COMPRESSOR.with(|compressor| {
            // Never re-entered (compressing calls nothing back); if it were,
            // the body is stored as it is.
            let mut compressor = compressor.try_borrow_mut().ok()?;
            let mut out = vec![0; compressor.gzip_compress_bound(body.len())];
            let len = compressor.gzip_compress(body, &mut out).ok()?;
            out.truncate(len);
            Some(out)
        });
        if let Some(compressed) = compressed {
            if units(compressed.len()) < units(body.len()) {
                return (std::borrow::Cow::Owned(compressed), true);
            }
        }
    }
    (std::borrow::Cow::Borrowed(body), false)
}

/// Bodies larger than this (uncompressed) are never stored, and a stored body
/// that decompresses to more is refused as corrupt: a Lambda function cannot
/// answer more than 6 MB (its synchronous response limit), so no true replay
/// is larger, and a foreign item cannot make a replay inflate without bound.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024;

/// Undo [`encode_body`]; `None` when the bytes are not valid gzip (a bad
/// checksum included) or inflate beyond [`MAX_BODY_BYTES`]. Any single-member
/// gzip decodes, whatever wrote it (records written with `flate2` before
/// this library used libdeflate too).
#[cfg_attr(not(any(feature = "dynamodb", feature = "redis")), allow(dead_code))]
pub(crate) fn decode_body(bytes: Vec<u8>, gzip: bool) -> Option<Vec<u8>> {
    if !gzip {
        return (bytes.len() <= MAX_BODY_BYTES).then_some(bytes);
    }
    // The gzip trailer ends with the body's length (modulo 2^32, and every
    // body here is far below that). A trailer that understates it makes the
    // output buffer too small, and decompression stops there: a foreign item
    // cannot make a replay inflate past what its trailer claims, nor past
    // the cap.
    let trailer: [u8; 4] = bytes.get(bytes.len().checked_sub(4)?..)?.try_into().ok()?;
    let len = usize::try_from(u32::from_le_bytes(trailer)).ok()?;
    if len > MAX_BODY_BYTES {
        return None;
    }
    let mut out = vec![0; len];
    let written = DECOMPRESSOR.with(|decompressor| {
        decompressor
            .try_borrow_mut()
            .ok()?
            .gzip_decompress(&bytes, &mut out)
            .ok()
    })?;
    (written == len).then_some(out)
}

/// Bytes a response takes when stored, given its encoded body: the body plus
/// the headers.
pub(crate) fn stored_len(response: &StoredResponse, encoded_body: &[u8]) -> usize {
    let headers: usize = response
        .headers
        .iter()
        .map(|(n, v)| n.len() + v.len() + 8)
        .sum();
    encoded_body.len() + headers + 64
}

/// What a record stores in place of a response too large to keep.
pub(crate) fn too_large_marker(status: u16, bytes: usize) -> StoredResponse {
    StoredResponse::problem(
        crate::problem::RESPONSE_TOO_LARGE,
        &format!(
            "the first request with this Idempotency-Key succeeded with status {status}, but its \
             response ({bytes} bytes stored) is too large to keep for replay; the request was \
             not run again. Fetch the resource it created instead"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "http")]
    fn http_round_trip_keeps_bytes_repeated_headers_and_body_kind() {
        let original = http::Response::builder()
            .status(207)
            .header("set-cookie", "a=1")
            .header("set-cookie", "b=2")
            .header(
                "x-raw",
                http::HeaderValue::from_bytes(b"\xe9t\xe9").unwrap(),
            )
            .body(Body::Binary(vec![0, 159, 146, 150, 255]))
            .unwrap();
        let stored = StoredResponse::from_http(&original);
        let replayed = stored.to_http();
        assert_eq!(replayed.status(), 207);
        let cookies: Vec<_> = replayed.headers().get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(replayed.headers()["x-raw"].as_bytes(), b"\xe9t\xe9");
        assert!(matches!(replayed.body(), Body::Binary(b) if b == &[0, 159, 146, 150, 255]));
        assert_eq!(StoredResponse::from_http(&replayed), stored);
    }

    /// No handler's response holds more header names than `http`'s map
    /// (24,576), but a stored record may (a foreign writer, damage): its
    /// replay is rebuilt without panicking and keeps room for the replay's
    /// own header.
    #[test]
    #[cfg(feature = "http")]
    fn a_stored_response_with_more_headers_than_a_response_holds_still_replays() {
        let headers = (0..30_000)
            .map(|i| (format!("x-h{i}"), b"v".to_vec()))
            .collect();
        let stored = StoredResponse::new(200, headers, StoredBody::Text("ok".into()));
        let mut replayed = stored.to_http();
        assert_eq!(replayed.headers().len(), MAX_REPLAYED_HEADERS);
        assert_eq!(replayed.headers()["x-h0"], "v");
        assert!(!replayed.headers().contains_key("x-h29999"));
        assert!(matches!(replayed.body(), Body::Text(t) if t == "ok"));
        replayed.headers_mut().insert(
            crate::http::REPLAYED_HEADER,
            http::HeaderValue::from_static("true"),
        );
        assert_eq!(replayed.headers()[crate::http::REPLAYED_HEADER], "true");
    }

    #[test]
    fn body_parts_round_trip_and_reject_unknown_tags() {
        for body in [
            StoredBody::Empty,
            StoredBody::Text("héllo".into()),
            StoredBody::Binary(vec![1, 2]),
        ] {
            let back = StoredBody::from_parts(body.kind(), body.bytes().to_vec());
            assert_eq!(back, Some(body));
        }
        assert_eq!(StoredBody::from_parts("gzip", vec![]), None);
    }

    #[test]
    fn bodies_are_compressed_where_it_saves_a_write_unit_and_round_trip() {
        let small = b"{\"a\":1}";
        assert_eq!(
            encode_body(small, RECORD_BYTES),
            (std::borrow::Cow::Borrowed(&small[..]), false)
        );
        // 700 compressible bytes: the record fits one unit as it is.
        let fits = "abc".repeat(233);
        assert!(!encode_body(fits.as_bytes(), RECORD_BYTES).1);
        // 900: the record would take two units, compressed it takes one.
        let spans = "abc".repeat(300);
        let (bytes, gzip) = encode_body(spans.as_bytes(), RECORD_BYTES);
        assert!(gzip && bytes.len() + RECORD_BYTES <= WRITE_UNIT_BYTES);
        let repetitive = "abc".repeat(10_000);
        let (bytes, gzip) = encode_body(repetitive.as_bytes(), RECORD_BYTES);
        assert!(gzip && bytes.len() < repetitive.len() / 10);
        assert_eq!(
            decode_body(bytes.into_owned(), true).unwrap(),
            repetitive.as_bytes()
        );
        // Random-looking bytes do not shrink: stored as they are.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let noise: Vec<u8> = (0..5000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(!encode_body(&noise, RECORD_BYTES).1);
        assert!(decode_body(vec![1, 2, 3], true).is_none());
        assert_eq!(StoredBody::from_parts("text", vec![0xff]), None);
    }

    #[test]
    fn a_body_that_inflates_past_the_cap_is_refused() {
        let at_cap = vec![0u8; MAX_BODY_BYTES];
        let (bytes, gzip) = encode_body(&at_cap, RECORD_BYTES);
        assert!(gzip && bytes.len() < 100_000);
        assert_eq!(
            decode_body(bytes.into_owned(), true).map(|b| b.len()),
            Some(MAX_BODY_BYTES)
        );
        // A gzip bomb: 7 MiB of zeros in a few kilobytes.
        let bomb = vec![0u8; 7 * 1024 * 1024];
        let (bytes, _) = encode_body(&bomb, RECORD_BYTES);
        assert!(decode_body(bytes.into_owned(), true).is_none());
        assert!(decode_body(bomb, false).is_none());
    }

    #[test]
    fn a_trailer_that_understates_the_length_does_not_inflate_past_it() {
        let zeros = vec![0u8; 7 * 1024 * 1024];
        let (bytes, gzip) = encode_body(&zeros, RECORD_BYTES);
        assert!(gzip);
        let mut lying = bytes.into_owned();
        let at = lying.len() - 4;
        lying[at..].copy_from_slice(&1000u32.to_le_bytes());
        assert!(decode_body(lying, true).is_none());
        // A checksum that does not match is refused too.
        let text = "abc".repeat(300);
        let (bytes, _) = encode_body(text.as_bytes(), RECORD_BYTES);
        let mut flipped = bytes.into_owned();
        let crc = flipped.len() - 8;
        flipped[crc] ^= 1;
        assert!(decode_body(flipped, true).is_none());
        assert!(decode_body(vec![], true).is_none());
    }

    #[test]
    fn a_body_gzipped_by_flate2_still_decodes() {
        // "abc" x 300 as `flate2::write::GzEncoder` at `Compression::fast()`
        // stored it, before this library compressed with libdeflate.
        let stored = vec![
            31, 139, 8, 0, 0, 0, 0, 0, 4, 255, 237, 208, 49, 13, 0, 0, 0, 194, 48, 173, 128, 127,
            15, 200, 216, 179, 164, 10, 154, 78, 14, 56, 0, 14, 28, 69, 41, 67, 38, 132, 3, 0, 0,
        ];
        assert_eq!(
            decode_body(stored, true).unwrap(),
            "abc".repeat(300).as_bytes()
        );
    }
}
