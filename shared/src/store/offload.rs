//! [`S3Offload`]: responses over a store's item limit kept in S3, in front
//! of any [`Store`].
//!
//! A completion whose response would not fit the store (the rule of
//! `store::fit`, the same limit) writes the whole response to S3 first,
//! at a key of its own attempt, then completes the record with a small
//! pointer (bucket, key, size, SHA-256) in one fenced write of the store: the
//! object is only ever reachable through a record that a fenced completion
//! wrote. Reads that hand a completed record to a replay (the claim, `get`)
//! follow the pointer and check the size and the hash, so a missing or
//! altered object is an error, never a wrong replay.

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_s3::primitives::ByteStream;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind};
use crate::hash::hex;
use crate::record::{
    encode_body, stored_len, Record, StoredBody, StoredResponse, MAX_BODY_BYTES, RECORD_BYTES,
};
use crate::store::{
    CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest, Completion, Lease, Listing,
    RecordPage, Resolution, ResolveRequest, Store, StoredRecord, StuckPage, StuckRequest,
    SweepCursor, SweepStore, DEFAULT_MAX_RESPONSE_BYTES,
};

/// The status of a pointer response: no HTTP handler can answer 0 (HTTP
/// status codes are 100 to 999) and event outputs are stored as 200, so a
/// record holding it was written by this wrapper.
const POINTER_STATUS: u16 = 0;

/// The header naming a pointer response and its format version.
const POINTER_HEADER: &str = "x-lambda-idempotency-offload";
const POINTER_VERSION: &[u8] = b"s3/v1";

/// The first line of every object: what wrote it, in which format.
const OBJECT_MAGIC: &[u8] = b"lambda-idempotency/offloaded-response/v1\n";

/// Objects larger than this are refused on read without being downloaded:
/// the largest body ever offloaded ([`MAX_BODY_BYTES`]) plus room for its
/// status and headers (API Gateway and Lambda cap headers far below it).
const MAX_OBJECT_BYTES: u64 = MAX_BODY_BYTES as u64 + 1024 * 1024;

/// A [`Store`] that keeps responses too large for `inner` in an S3 bucket
/// and a pointer to them in the record. Everything else goes to `inner`
/// unchanged, so it works with [`DynamoStore`](crate::DynamoStore),
/// [`MemoryStore`](crate::store::memory::MemoryStore) or a store of your own.
///
/// Without it, a response that does not fit the store completes the record
/// with the `response-too-large` problem (HTTP: a 500 to every retry; events:
/// [`EventError::OutputTooLarge`](crate::event::EventError::OutputTooLarge)). With
/// it, such a response replays byte for byte like any other:
///
/// - **complete**: a response over the limit (decided like the store decides,
///   compression included, with the same limit: keep
///   [`max_response_bytes`](S3Offload::max_response_bytes) equal to the
///   store's) is written to `s3://<bucket>/<prefix><record id>/<attempt>-<owner>`
///   (one key per attempt, so a stale attempt never overwrites the object of
///   a newer one), then the record completes with a pointer, fenced as usual.
///   If the S3 write fails the completion fails with
///   [`ErrorKind::StoreUnavailable`] and the record is not completed. If the
///   completion finds the record gone ([`ErrorKind::RecordGone`]) or is
///   refused (nothing written), the object is deleted; if it is fenced, the
///   object is deleted once the record is read and does not point to it (a
///   transaction retried after a lost answer comes back fenced with its
///   pointer written); if its outcome is unknown (the store timed out) the
///   object is kept, as the record may point to it. A failed delete is
///   logged, and the completion's answer stays what the store said.
/// - **claim** and **get**: a completed record's pointer is followed; the
///   object must have the size and SHA-256 the pointer recorded, or the read
///   fails ([`ErrorKind::CorruptRecord`] for a missing or altered object,
///   [`ErrorKind::StoreUnavailable`] when S3 cannot be reached), so the
///   middleware answers `503` and an event fails rather than replay a wrong
///   response.
/// - **scan** returns records as stored: an offloaded response shows as its
///   pointer (status 0, header `x-lambda-idempotency-offload`, the pointer as
///   JSON body), which listings can show without downloading every object.
///
/// The bucket needs a lifecycle rule expiring objects no sooner than the
/// records (an object expired first makes its record fail on replay); SAM's
/// `template.yaml` in the repository has one. The function needs
/// `s3:PutObject`, `s3:GetObject` and `s3:DeleteObject` on the prefix.
///
/// ```no_run
/// use lambda_idempotency::{DynamoStore, IdempotencyLayer, store::offload::S3Offload};
///
/// # async fn example() -> Result<(), lambda_idempotency::Error> {
/// let aws = aws_config::load_from_env().await;
/// let store = DynamoStore::builder(aws_sdk_dynamodb::Client::new(&aws), "idempotency").open()?;
/// let store = S3Offload::new(store, aws_sdk_s3::Client::new(&aws), "my-offload-bucket")
///     .key_prefix("orders-api/");
/// let layer = IdempotencyLayer::new(store);
/// # let _ = layer; Ok(()) }
/// ```
///
/// Small responses never touch S3:
///
/// ```
/// use lambda_idempotency::{MemoryStore, store::DEFAULT_MAX_RESPONSE_BYTES, store::offload::S3Offload};
///
/// let s3 = aws_sdk_s3::Client::from_conf(
///     aws_sdk_s3::Config::builder()
///         .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
///         .region(aws_sdk_s3::config::Region::new("us-east-1"))
///         .build(),
/// );
/// let store = S3Offload::new(MemoryStore::new(), s3, "bucket").key_prefix("api/");
/// assert_eq!(store.limit(), DEFAULT_MAX_RESPONSE_BYTES);
/// assert!(store.describe_offload().contains("s3://bucket/api/"));
/// ```
#[derive(Debug, Clone)]
pub struct S3Offload<S> {
    inner: S,
    client: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
    max_response_bytes: usize,
}

impl<S: Store> S3Offload<S> {
    /// Offload `inner`'s responses over [`DEFAULT_MAX_RESPONSE_BYTES`] to
    /// `bucket`, under the prefix `idempotency/`.
    pub fn new(inner: S, client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        S3Offload {
            inner,
            client,
            bucket: bucket.into(),
            prefix: "idempotency/".to_owned(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// Put objects under `prefix` (say `orders-api/`: the IAM policy and the
    /// lifecycle rule can then be scoped to one function).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Offload responses that would take more than `bytes` in the store
    /// (body compressed where that helps, plus headers): set the limit the
    /// inner store was given (`DynamoStoreBuilder::max_response_bytes`,
    /// `MemoryStore::with_max_response_bytes`), default
    /// [`DEFAULT_MAX_RESPONSE_BYTES`].
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// The limit above which responses are offloaded, in bytes.
    pub fn limit(&self) -> usize {
        self.max_response_bytes
    }

    /// Where objects go, for messages (`s3://bucket/prefix`).
    pub fn describe_offload(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Would the store keep `response` as it is? The same rule as the
    /// store's [`fit`](super::rules::fit) (without its log line: here a response
    /// that does not fit is not lost). Bodies over [`MAX_BODY_BYTES`] are
    /// left to the store (they get its too-large marker): Lambda cannot
    /// answer them, so no replay of them could be true.
    fn offloads(&self, response: &StoredResponse) -> bool {
        let raw = response.body.bytes();
        if raw.len() > MAX_BODY_BYTES || stored_len(response, raw) <= self.max_response_bytes {
            return false;
        }
        let (body, _) = encode_body(raw, RECORD_BYTES + stored_len(response, &[]));
        stored_len(response, &body) > self.max_response_bytes
    }

    /// The object key of `lease`'s response: one per attempt and owner.
    fn key_of(&self, lease: &Lease) -> String {
        format!(
            "{}{}/{}-{}",
            self.prefix, lease.record_id, lease.attempt, lease.owner
        )
    }

    /// Complete `lease` as `request` says (with its writes, when there are
    /// some: the store's transactional completion), the response through S3
    /// when it does not fit; exactly the inner store's call when it does.
    async fn complete_via(&self, request: CompleteRequest<'_>) -> Result<Completion, Error> {
        let (lease, response) = (request.lease, request.response);
        if !self.offloads(response) {
            return self.inner.complete(request).await;
        }
        let key = self.key_of(lease);
        let object = encode_object(response);
        let pointer = Pointer {
            bucket: self.bucket.clone(),
            key: key.clone(),
            bytes: object.len() as u64,
            sha256: hex(&Sha256::digest(&object)),
        };
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .content_type("application/octet-stream")
            .body(ByteStream::from(object))
            .send()
            .await
            .map_err(|e| {
                Error::store_unavailable(
                    format!(
                        "could not write the response of idempotency record {} ({} bytes, too \
                         large for the store) to s3://{}/{key}: {}; the record was not \
                         completed. Check that the bucket exists and the function may \
                         s3:PutObject there",
                        lease.record_id,
                        pointer.bytes,
                        self.bucket,
                        DisplayErrorContext(&e)
                    ),
                    e,
                )
            })?;
        tracing::info!(
            record_id = %lease.record_id,
            attempt = lease.attempt,
            bytes = pointer.bytes,
            key = %key,
            "response too large for the store offloaded to S3"
        );
        let pointed = pointer.to_response();
        let completed = self
            .inner
            .complete(CompleteRequest {
                response: &pointed,
                ..request
            })
            .await;
        match &completed {
            Ok(Completion::Stored) => {}
            // The store keeps less than a pointer: the record holds its
            // too-large marker, not the pointer.
            Ok(Completion::Oversized { .. }) => {
                self.delete(&key, "the store refused even its pointer")
                    .await
            }
            // A fence says another attempt holds the record, but a
            // transaction retried after its answer was lost comes back
            // fenced too (DynamoDB's does not recognise its own
            // completion), with this very pointer written: the object goes
            // only once the record is seen not to point to it.
            Err(e) if e.kind() == ErrorKind::Fenced => {
                self.delete_unless_pointed_to(lease, &key).await
            }
            Err(e) if nothing_written(e.kind()) => {
                self.delete(&key, "its completion wrote nothing").await
            }
            // Unknown whether the record now points to the object: keep it
            // (the bucket's lifecycle removes it if not).
            Err(_) => {}
        }
        completed
    }

    /// Delete `key`, the object of `lease`'s fenced completion, unless its
    /// record points to it; kept (and logged) when the record cannot be
    /// read or its pointer cannot be told.
    async fn delete_unless_pointed_to(&self, lease: &Lease, key: &str) {
        let pointed_to = match self.inner.get(&lease.record_id).await {
            Ok(None) => Ok(false),
            Ok(Some(found)) => match found.record.response.as_ref() {
                None => Ok(false),
                Some(response) => Pointer::of(response, &lease.record_id)
                    .map(|pointer| pointer.is_some_and(|p| p.key == key)),
            },
            Err(err) => Err(err),
        };
        match pointed_to {
            Ok(false) => self.delete(key, "its completion was fenced").await,
            Ok(true) => tracing::warn!(
                record_id = %lease.record_id,
                attempt = lease.attempt,
                key,
                "completion reported fenced, yet the record points to its offloaded response \
                 (its own write came back, as a retried transaction's does); the object is kept"
            ),
            Err(err) => tracing::warn!(
                record_id = %lease.record_id,
                key,
                error = %err,
                "could not tell whether the record of a fenced completion points to its \
                 offloaded response; the object is kept (the bucket's lifecycle rule removes it)"
            ),
        }
    }

    /// Delete an object no record points to; a failure is logged (the
    /// bucket's lifecycle removes it).
    async fn delete(&self, key: &str, why: &str) {
        match self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => tracing::info!(key, reason = why, "offloaded response deleted"),
            Err(e) => tracing::warn!(
                key,
                reason = why,
                error = %DisplayErrorContext(&e),
                "could not delete an offloaded response no record points to; the bucket's lifecycle rule removes it"
            ),
        }
    }

    /// `record` with its pointer, if any, replaced by the response it
    /// points to, checked.
    async fn resolve(&self, mut record: Record) -> Result<Record, Error> {
        let Some(pointer) = record
            .response
            .as_ref()
            .map(|r| Pointer::of(r, &record.id))
            .transpose()?
            .flatten()
        else {
            return Ok(record);
        };
        record.response = Some(self.fetch(&pointer, &record.id).await?);
        Ok(record)
    }

    /// The response `pointer` points to, checked against its size and hash.
    async fn fetch(&self, pointer: &Pointer, record_id: &str) -> Result<StoredResponse, Error> {
        let place = format!("s3://{}/{}", pointer.bucket, pointer.key);
        if pointer.bucket != self.bucket {
            return Err(corrupt(
                record_id,
                &format!(
                    "its offloaded response is in {place}, not in this store's bucket `{}`",
                    self.bucket
                ),
            ));
        }
        // Objects of this record live under `<prefix><record id>/` (see
        // `key_of`): a pointer elsewhere, another record's object with its
        // right size and hash included, would replay a response that is
        // not this record's. Refused before anything is read.
        let own = format!("{}{record_id}/", self.prefix);
        if !pointer.key.starts_with(&own) || pointer.key.len() == own.len() {
            return Err(corrupt(
                record_id,
                &format!(
                    "its pointer names {place}, which is not one of this record's objects \
                     (they are under s3://{}/{own}): the pointer was altered, or the key prefix \
                     changed since the record was written",
                    self.bucket
                ),
            ));
        }
        if pointer.bytes > MAX_OBJECT_BYTES {
            return Err(corrupt(
                record_id,
                &format!(
                    "its offloaded response {place} has {} bytes, more than any response \
                     (at most {MAX_OBJECT_BYTES} are read)",
                    pointer.bytes
                ),
            ));
        }
        let output = match self
            .client
            .get_object()
            .bucket(&pointer.bucket)
            .key(&pointer.key)
            .send()
            .await
        {
            Ok(output) => output,
            Err(e) if e.code() == Some("NoSuchKey") => {
                return Err(corrupt(
                    record_id,
                    &format!(
                        "its offloaded response {place} is missing (deleted, or expired by the \
                         bucket's lifecycle before the record: make the lifecycle at least as \
                         long as the records' life)"
                    ),
                ))
            }
            Err(e) => {
                let message = format!(
                    "could not read the offloaded response of idempotency record {record_id} \
                     from {place}: {}; retry later",
                    DisplayErrorContext(&e)
                );
                return Err(Error::store_unavailable(message, e));
            }
        };
        let length = output.content_length().and_then(|n| u64::try_from(n).ok());
        if let Some(length) = length.filter(|n| *n != pointer.bytes) {
            return Err(corrupt(
                record_id,
                &format!(
                    "its offloaded response {place} has {length} bytes, the record says {}: it \
                     was altered or replaced",
                    pointer.bytes
                ),
            ));
        }
        let object = output
            .body
            .collect()
            .await
            .map_err(|e| {
                Error::store_unavailable(
                    format!(
                        "could not read the offloaded response of idempotency record \
                         {record_id} from {place}: {e}; retry later"
                    ),
                    e,
                )
            })?
            .into_bytes();
        if object.len() as u64 != pointer.bytes || hex(&Sha256::digest(&object)) != pointer.sha256 {
            return Err(corrupt(
                record_id,
                &format!(
                    "its offloaded response {place} is not the one the record points to (size \
                     or SHA-256 differ): it was altered or replaced"
                ),
            ));
        }
        decode_object(&object).ok_or_else(|| {
            corrupt(
                record_id,
                &format!("its offloaded response {place} is not in the offload format"),
            )
        })
    }
}

/// Errors after which the store wrote nothing and the record certainly
/// does not point to the object: gone (`RecordGone`: no record at all), or
/// refused before or with its writes. (`Fenced` is told apart by reading the
/// record: see `delete_unless_pointed_to`.)
fn nothing_written(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::RecordGone
            | ErrorKind::TransactionCancelled
            | ErrorKind::TransactionRejected
            | ErrorKind::InvalidConfig
    )
}

fn corrupt(record_id: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::CorruptRecord,
        format!("idempotency record {record_id} cannot be replayed: {what}"),
    )
}

/// Where an offloaded response is: what the record stores instead of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Pointer {
    bucket: String,
    key: String,
    /// Size of the object, bytes.
    bytes: u64,
    /// SHA-256 of the object, lower-case hex.
    sha256: String,
}

impl Pointer {
    /// The pointer `response` is, `None` when it is a response of its own;
    /// an error when it is marked as a pointer but cannot be read as one.
    fn of(response: &StoredResponse, record_id: &str) -> Result<Option<Pointer>, Error> {
        if response.status != POINTER_STATUS {
            return Ok(None);
        }
        let Some((_, version)) = response.headers.iter().find(|(n, _)| n == POINTER_HEADER) else {
            return Ok(None);
        };
        if version != POINTER_VERSION {
            return Err(corrupt(
                record_id,
                &format!(
                    "its response points to S3 in format {:?}, which this version does not read",
                    String::from_utf8_lossy(version)
                ),
            ));
        }
        serde_json::from_slice(response.body.bytes())
            .map(Some)
            .map_err(|e| corrupt(record_id, &format!("its pointer to S3 is malformed: {e}")))
    }

    /// The pointer as a response every store keeps unchanged.
    fn to_response(&self) -> StoredResponse {
        // Serialising four plain fields cannot fail.
        let json = serde_json::to_string(self).unwrap_or_default();
        StoredResponse::new(
            POINTER_STATUS,
            vec![(POINTER_HEADER.to_owned(), POINTER_VERSION.to_vec())],
            StoredBody::Text(json),
        )
    }
}

/// Status, headers and body kind of an offloaded response (one JSON line).
#[derive(Serialize, Deserialize)]
struct ObjectHead {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: String,
}

/// The object of a response: [`OBJECT_MAGIC`], the head as one line of
/// JSON (JSON escapes newlines in strings, so the line ends at the first
/// one), then the body bytes as they are.
fn encode_object(response: &StoredResponse) -> Vec<u8> {
    let head = ObjectHead {
        status: response.status,
        headers: response.headers.clone(),
        body: response.body.kind().to_owned(),
    };
    // A head of numbers, strings and byte arrays always serialises.
    let head = serde_json::to_vec(&head).unwrap_or_default();
    let body = response.body.bytes();
    let mut object = Vec::with_capacity(OBJECT_MAGIC.len() + head.len() + 1 + body.len());
    object.extend_from_slice(OBJECT_MAGIC);
    object.extend_from_slice(&head);
    object.push(b'\n');
    object.extend_from_slice(body);
    object
}

/// Undo [`encode_object`]; `None` when `object` is not in that format.
fn decode_object(object: &[u8]) -> Option<StoredResponse> {
    let rest = object.strip_prefix(OBJECT_MAGIC)?;
    let end = rest.iter().position(|b| *b == b'\n')?;
    let head: ObjectHead = serde_json::from_slice(&rest[..end]).ok()?;
    let body = StoredBody::from_parts(&head.body, rest[end + 1..].to_vec())?;
    Some(StoredResponse::new(head.status, head.headers, body))
}

#[async_trait::async_trait]
impl<S: Store> Store for S3Offload<S> {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        match self.inner.claim(request).await? {
            ClaimOutcome::Exists(record) => Ok(ClaimOutcome::Exists(self.resolve(record).await?)),
            claimed => Ok(claimed),
        }
    }

    async fn complete(&self, request: CompleteRequest<'_>) -> Result<Completion, Error> {
        self.complete_via(request).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        self.inner.release(lease).await
    }

    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
        self.inner.checkpoint(request).await
    }

    /// The inner store's record, with its offloaded response read from S3.
    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        let Some(stored) = self.inner.get(record_id).await? else {
            return Ok(None);
        };
        Ok(Some(StoredRecord {
            record: self.resolve(stored.record).await?,
            ..stored
        }))
    }

    fn describe(&self) -> String {
        format!(
            "{} (responses over {} bytes offloaded to {})",
            self.inner.describe(),
            self.max_response_bytes,
            self.describe_offload()
        )
    }

    fn reads_origin(&self) -> bool {
        self.inner.reads_origin()
    }

    async fn warm_up(&self) -> Result<(), Error> {
        self.inner.warm_up().await
    }
}

/// The sweeper's side goes to the inner store, when it has one.
#[async_trait::async_trait]
impl<S: SweepStore> SweepStore for S3Offload<S> {
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
        self.inner.stuck(request).await
    }

    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
        self.inner.resolve_stuck(request).await
    }

    async fn finish(&self, listing: &Listing, resolved: &[String]) -> Result<(), Error> {
        self.inner.finish(listing, resolved).await
    }

    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        self.inner.scan(cursor, limit).await
    }

    async fn delete_expired(&self, now_s: u64, limit: usize) -> Result<u64, Error> {
        // The objects of expired records go with the bucket's lifecycle rule.
        self.inner.delete_expired(now_s, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> aws_sdk_s3::Client {
        aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::Config::builder()
                .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
                .region(aws_sdk_s3::config::Region::new("us-east-1"))
                .build(),
        )
    }

    #[test]
    fn objects_round_trip_status_repeated_headers_raw_bytes_and_body_kind() {
        for body in [
            StoredBody::Empty,
            StoredBody::Text("line one\nline two".into()),
            StoredBody::Binary(vec![0, b'\n', 255, 10, 13]),
        ] {
            let response = StoredResponse::new(
                207,
                vec![
                    ("set-cookie".into(), b"a=1".to_vec()),
                    ("set-cookie".into(), b"b=2".to_vec()),
                    ("x-raw".into(), b"\xe9\n\xe9".to_vec()),
                ],
                body,
            );
            assert_eq!(decode_object(&encode_object(&response)), Some(response));
        }
        assert_eq!(decode_object(b"not an object"), None);
        let mut wrong_kind = encode_object(&StoredResponse::new(
            200,
            vec![],
            StoredBody::Text("x".into()),
        ));
        let at = wrong_kind.len() - 1;
        wrong_kind[at] = 0xff; // a text body that is no longer UTF-8
        assert_eq!(decode_object(&wrong_kind), None);
    }

    #[test]
    fn pointers_round_trip_and_ordinary_responses_are_not_pointers() {
        let pointer = Pointer {
            bucket: "b".into(),
            key: "p/r/1-o".into(),
            bytes: 3,
            sha256: "ab".into(),
        };
        assert_eq!(
            Pointer::of(&pointer.to_response(), "r").unwrap(),
            Some(pointer)
        );
        let ordinary = StoredResponse::new(200, vec![], StoredBody::Text("{}".into()));
        assert_eq!(Pointer::of(&ordinary, "r").unwrap(), None);
        let future = StoredResponse::new(
            POINTER_STATUS,
            vec![(POINTER_HEADER.into(), b"s3/v9".to_vec())],
            StoredBody::Text("{}".into()),
        );
        assert_eq!(
            Pointer::of(&future, "r").unwrap_err().kind(),
            ErrorKind::CorruptRecord
        );
    }

    #[test]
    fn only_responses_that_do_not_fit_even_compressed_are_offloaded() {
        let store = S3Offload::new(crate::store::memory::MemoryStore::new(), client(), "b")
            .max_response_bytes(10_000);
        let small = StoredResponse::new(200, vec![], StoredBody::Text("x".repeat(5_000)));
        assert!(!store.offloads(&small));
        // Compresses far below the limit: the store keeps it.
        let compressible = StoredResponse::new(200, vec![], StoredBody::Text("x".repeat(50_000)));
        assert!(!store.offloads(&compressible));
        let mut x: u32 = 1;
        let noise: Vec<u8> = (0..50_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let incompressible = StoredResponse::new(200, vec![], StoredBody::Binary(noise));
        assert!(store.offloads(&incompressible));
        // Over what Lambda can answer: left to the store's marker.
        let huge =
            StoredResponse::new(200, vec![], StoredBody::Binary(vec![7; MAX_BODY_BYTES + 1]));
        assert!(!store.offloads(&huge));
    }

    /// Remembers the listing it was asked for; nothing else is called.
    #[derive(Debug, Default)]
    struct ListingSpy(std::sync::Mutex<Option<StuckRequest>>);

    #[async_trait::async_trait]
    impl Store for ListingSpy {
        async fn claim(&self, _: &ClaimRequest) -> Result<ClaimOutcome, Error> {
            Err(Error::new(ErrorKind::InvalidConfig, "not called"))
        }
        async fn complete(&self, _: CompleteRequest<'_>) -> Result<Completion, Error> {
            Err(Error::new(ErrorKind::InvalidConfig, "not called"))
        }
        async fn checkpoint(&self, _: CheckpointRequest<'_>) -> Result<(), Error> {
            Err(Error::new(ErrorKind::InvalidConfig, "not called"))
        }
        async fn release(&self, _: &Lease) -> Result<(), Error> {
            Err(Error::new(ErrorKind::InvalidConfig, "not called"))
        }
        async fn get(&self, _: &str) -> Result<Option<StoredRecord>, Error> {
            Err(Error::new(ErrorKind::InvalidConfig, "not called"))
        }
    }

    #[async_trait::async_trait]
    impl SweepStore for ListingSpy {
        async fn finish(&self, _listing: &Listing, _resolved: &[String]) -> Result<(), Error> {
            Ok(())
        }
        async fn delete_expired(&self, _now_s: u64, _limit: usize) -> Result<u64, Error> {
            Ok(0)
        }
        async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
            *self.0.lock().expect("not poisoned") = Some(request);
            Ok(StuckPage::default())
        }
        async fn resolve_stuck(&self, _: ResolveRequest<'_>) -> Result<Resolution, Error> {
            Err(Error::new(ErrorKind::InvalidConfig, "not called"))
        }
        async fn scan(&self, _: Option<SweepCursor>, _: usize) -> Result<RecordPage, Error> {
            Err(Error::new(ErrorKind::InvalidConfig, "not called"))
        }
    }

    /// A sweep's deadline reaches the store under the offload: a stream
    /// listing stops there instead of reading past the sweep's end. (Before
    /// the deadline was a field of the listing, the offload dropped it.)
    #[tokio::test]
    async fn a_listing_keeps_its_deadline_through_the_offload() {
        let offload = S3Offload::new(ListingSpy::default(), client(), "bucket");
        let request = StuckRequest::new(1_000, 10).by(5_000);
        offload.stuck(request.clone()).await.unwrap();
        assert_eq!(offload.inner.0.lock().unwrap().as_ref(), Some(&request));
    }
}
