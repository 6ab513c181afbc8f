//! A DynamoDB Streams proxy in front of DynamoDB Local (which serves its
//! streams on the same port), injecting what the real service does and the
//! local engine never does: empty `GetRecords` pages in the middle of a
//! shard, records trimmed past the 24-hour retention, a shard that cannot be
//! read (throttled past the SDK's retries, or failing), a reader held
//! back while another overtakes it (two sweeps overlapping), and a shard
//! that closes (its child takes the writes) and later leaves the stream.
//!
//! Point a streams client at [`StreamsProxy::endpoint`] (see
//! [`StreamsProxy::client`]); the table's own client stays on DynamoDB Local.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::fault_proxy::{canned, read_message, Message};

/// A running proxy; its faults are set and cleared while it runs.
#[derive(Clone)]
pub struct StreamsProxy {
    addr: SocketAddr,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    upstream: Option<SocketAddr>,
    /// `GetRecords` calls still to answer with an empty page.
    empty_pages: AtomicU64,
    /// `GetRecords` calls still answered normally before every later one
    /// fails (`u64::MAX`: none fails).
    reads_before_failure: AtomicU64,
    /// Failing reads answer a throttling error (else a 500).
    fail_with_throttling: AtomicBool,
    /// Records of this sequence number and below are trimmed.
    trimmed_through: Mutex<Option<String>>,
    /// `GetRecords` calls past this many (counted from the start) wait
    /// until released (`u64::MAX`: none waits).
    hold_after: AtomicU64,
    /// Told when held calls may go on.
    released: tokio::sync::watch::Sender<u64>,
    /// The stream shows one more shard, read before the real one, whose
    /// every `GetRecords` is throttled.
    failing_shard: AtomicBool,
    /// The failing shard is listed last.
    failing_last: AtomicBool,
    /// The real shards are closed at this sequence number: the stream
    /// describes them closed, with one open child (empty, at the present)
    /// of the first, and their reads end after it.
    closed_at: Mutex<Option<String>>,
    /// The closed shards have left the stream (a day after closing): only
    /// their child is described, naming its parent.
    closed_gone: AtomicBool,
    /// Fresh iterators (`GetShardIterator`) start this many empty pages
    /// before the records: an empty stretch of the shard at every place,
    /// which only an iterator already past it crosses at once.
    stretch: AtomicU64,
    /// Records of these record ids are never shown (dropped by the
    /// service, or a defect of the reader): only a full pass finds them.
    hidden: Mutex<std::collections::HashSet<String>>,
    /// Seeded faults on every page and description ([`Chaos`]), and the
    /// iterators a delay has held back once already.
    chaos: Mutex<Option<Chaos>>,
    delayed: Mutex<std::collections::HashSet<String>>,
    descriptions: AtomicU64,
    /// Iterators the proxy passed on, and those a trim made stale (the
    /// service's iterators last 15 minutes; a trim stands for a day gone).
    issued: Mutex<std::collections::HashSet<String>>,
    expired: Mutex<std::collections::HashSet<String>>,
    /// What the proxy did.
    get_records: AtomicU64,
    /// `GetRecords` calls the engine answered.
    answered: AtomicU64,
    empty_answered: AtomicU64,
    failed: AtomicU64,
    trimmed_refusals: AtomicU64,
}

/// Sequence numbers are decimal strings: compare them as numbers.
fn at_or_below(sequence: &str, limit: &str) -> bool {
    let (a, b) = (
        sequence.trim_start_matches('0'),
        limit.trim_start_matches('0'),
    );
    (a.len(), a) <= (b.len(), b)
}

impl StreamsProxy {
    /// Start on a free loopback port, forwarding to DynamoDB Local.
    pub async fn start() -> std::io::Result<StreamsProxy> {
        use std::net::ToSocketAddrs;
        let endpoint = crate::endpoint();
        let upstream = endpoint
            .trim_start_matches("http://")
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{endpoint} resolves to nothing")))?;
        let state = Arc::new(State {
            upstream: Some(upstream),
            reads_before_failure: AtomicU64::new(u64::MAX),
            hold_after: AtomicU64::new(u64::MAX),
            ..State::default()
        });
        let addr = crate::serve_on_loopback(state.clone(), serve).await?;
        Ok(StreamsProxy { addr, state })
    }

    /// `http://host:port`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A streams client through the proxy, making one attempt per call (so
    /// an injected failure is the call's failure, as after the SDK's retries).
    pub async fn client(&self) -> aws_sdk_dynamodbstreams::Client {
        let shared = aws_config::from_env()
            .region(aws_config::Region::new("us-east-1"))
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(1))
            .load()
            .await;
        let config = aws_sdk_dynamodbstreams::config::Builder::from(&shared)
            .endpoint_url(self.endpoint())
            .build();
        aws_sdk_dynamodbstreams::Client::from_conf(config)
    }

    /// Answer the next `n` `GetRecords` calls with an empty page whose next
    /// iterator is the one asked with: the records lie further on.
    pub fn empty_pages(&self, n: u64) {
        self.state.empty_pages.store(n, Ordering::SeqCst);
    }

    /// Let `n` more `GetRecords` calls succeed, then fail every later one
    /// (a throttling error if `throttle`, else a 500) until [`heal`](Self::heal).
    /// Calls the engine itself refuses pass through uncounted.
    pub fn fail_reads_after(&self, n: u64, throttle: bool) {
        self.state
            .fail_with_throttling
            .store(throttle, Ordering::SeqCst);
        self.state.reads_before_failure.store(n, Ordering::SeqCst);
    }

    /// Show one more shard in the stream (no parent, listed first) whose
    /// every read is throttled: a stream of two shards, one of them failing.
    pub fn add_failing_shard(&self) {
        self.state.failing_shard.store(true, Ordering::SeqCst);
    }

    /// List the failing shard after the real ones from now on (the service
    /// gives no order among shards that are not parent and child).
    pub fn list_failing_shard_last(&self) {
        self.state.failing_last.store(true, Ordering::SeqCst);
    }

    /// Close the stream's shards at `sequence` (their last record), as the
    /// service does every few hours: they are described with that ending
    /// sequence number and read to their end (no next iterator past it),
    /// and an open child of the first, which holds no record, is described
    /// after them. Records written later are not shown: write none.
    pub fn close_shards_at(&self, sequence: &str) {
        if let Ok(mut closed) = self.state.closed_at.lock() {
            *closed = Some(sequence.to_owned());
        }
    }

    /// The shards [`close_shards_at`](Self::close_shards_at) closed leave
    /// the stream (as a day after closing): only their child is described.
    pub fn drop_closed_shards(&self) {
        self.state.closed_gone.store(true, Ordering::SeqCst);
    }

    /// Stop failing reads.
    pub fn heal(&self) {
        self.state
            .reads_before_failure
            .store(u64::MAX, Ordering::SeqCst);
    }

    /// Trim every record up to `sequence` (inclusive), as the service does
    /// to records older than 24 hours: they are no longer returned, and an
    /// iterator asked at or after one of them is refused with
    /// `TrimmedDataAccessException`.
    pub fn trim_through(&self, sequence: &str) {
        if let Ok(mut trimmed) = self.state.trimmed_through.lock() {
            *trimmed = Some(sequence.to_owned());
        }
        // A trim stands for a day gone by: every iterator handed out before
        // it has expired.
        self.expire_iterators();
    }

    /// Fault every answer from now on as `chaos` says (seeded: the same
    /// seed faults the same records the same way).
    pub fn chaos(&self, chaos: Chaos) {
        if let Ok(mut set) = self.state.chaos.lock() {
            *set = Some(chaos);
        }
    }

    /// Never show the records of `id` (attribute `id`) in the stream.
    pub fn hide_record(&self, id: &str) {
        if let Ok(mut hidden) = self.state.hidden.lock() {
            hidden.insert(id.to_owned());
        }
    }

    /// Every iterator handed out so far expires (`ExpiredIteratorException`),
    /// as 15 minutes after the service hands one out.
    pub fn expire_iterators(&self) {
        if let (Ok(mut issued), Ok(mut expired)) =
            (self.state.issued.lock(), self.state.expired.lock())
        {
            expired.extend(issued.drain());
        }
    }

    /// Every iterator asked from now on (`GetShardIterator`) meets `n`
    /// empty pages before the shard's records, as where the service has
    /// long stretches without records: a listing that starts again from its
    /// saved place reads them all again; one that goes on from the iterator
    /// it stopped at does not.
    pub fn empty_stretch(&self, n: u64) {
        self.state.stretch.store(n, Ordering::SeqCst);
    }

    /// Let `n` more `GetRecords` calls the engine answers through, then
    /// hold every later answer until [`release`](Self::release) (a reader
    /// that hangs).
    pub fn hold_after(&self, n: u64) {
        let so_far = self.state.answered.load(Ordering::SeqCst);
        self.state
            .hold_after
            .store(so_far.saturating_add(n), Ordering::SeqCst);
    }

    /// Let held calls go on.
    pub fn release(&self) {
        self.state.hold_after.store(u64::MAX, Ordering::SeqCst);
        self.state.released.send_modify(|n| *n += 1);
    }

    /// `GetRecords` calls that reached the proxy.
    pub fn get_records(&self) -> u64 {
        self.state.get_records.load(Ordering::SeqCst)
    }

    /// Empty pages injected so far.
    pub fn empty_answered(&self) -> u64 {
        self.state.empty_answered.load(Ordering::SeqCst)
    }

    /// Reads failed by the proxy so far.
    pub fn failed(&self) -> u64 {
        self.state.failed.load(Ordering::SeqCst)
    }

    /// Iterators refused as trimmed so far.
    pub fn trimmed_refusals(&self) -> u64 {
        self.state.trimmed_refusals.load(Ordering::SeqCst)
    }
}

/// The highest sequence number in the stream of `table` now, read straight
/// from DynamoDB Local (what a trim "through now" trims).
pub async fn latest_sequence(table: &str) -> Option<String> {
    let client = crate::client().await;
    let streams = crate::streams_client().await;
    let arn = client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .ok()?
        .table()?
        .latest_stream_arn()?
        .to_owned();
    let description = streams
        .describe_stream()
        .stream_arn(&arn)
        .send()
        .await
        .ok()?;
    let mut latest: Option<String> = None;
    for shard in description.stream_description()?.shards() {
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(&arn)
            .shard_id(shard.shard_id()?)
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .ok()?
            .shard_iterator()
            .map(str::to_owned);
        while let Some(current) = iterator.take() {
            let out = streams
                .get_records()
                .shard_iterator(current)
                .send()
                .await
                .ok()?;
            for record in out.records() {
                if let Some(seq) = record.dynamodb().and_then(|d| d.sequence_number()) {
                    if latest.as_deref().is_none_or(|l| !at_or_below(seq, l)) {
                        latest = Some(seq.to_owned());
                    }
                }
            }
            if out.records().is_empty() {
                break;
            }
            iterator = out.next_shard_iterator().map(str::to_owned);
        }
    }
    latest
}

/// The id and the iterator of the shard [`StreamsProxy::add_failing_shard`] adds.
const FAILING_SHARD: &str = "shardId-00000000000000000000-failing";
const FAILING_ITERATOR: &str = "failing-shard-iterator";
/// The id and the iterator of the open child [`StreamsProxy::close_shards_at`] adds.
const CHILD_SHARD: &str = "shardId-99999999999999999999-child";
const CHILD_ITERATOR: &str = "child-shard-iterator";

fn target(head: &str) -> String {
    head.lines()
        .find_map(|l| l.strip_prefix("x-amz-target:"))
        .map(str::trim)
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or_default()
        .to_owned()
}

fn ok_json(body: &Value) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The failure [`StreamsProxy::fail_reads_after`] injects, counted.
fn injected_failure(state: &State) -> Vec<u8> {
    state.failed.fetch_add(1, Ordering::SeqCst);
    if state.fail_with_throttling.load(Ordering::SeqCst) {
        canned(
            "400 Bad Request",
            "ThrottlingException",
            "Rate exceeded for shard (injected)",
        )
    } else {
        canned(
            "500 Internal Server Error",
            "InternalServerError",
            "Internal server error (injected)",
        )
    }
}

/// Prefix of the iterators that still have empty pages of a stretch ahead:
/// `stretch:<pages left>:<the engine's iterator>`.
const STRETCH: &str = "stretch:";

/// The empty page a stretch iterator answers (the last one hands over the
/// engine's iterator), or `None` for any other iterator.
fn stretch_page(state: &State, iterator: &str) -> Option<Value> {
    let (left, real) = iterator.strip_prefix(STRETCH)?.split_once(':')?;
    let left: u64 = left.parse().ok()?;
    state.get_records.fetch_add(1, Ordering::SeqCst);
    state.empty_answered.fetch_add(1, Ordering::SeqCst);
    let next = match left.saturating_sub(1) {
        0 => real.to_owned(),
        more => format!("{STRETCH}{more}:{real}"),
    };
    Some(serde_json::json!({ "Records": [], "NextShardIterator": next }))
}

/// Seeded faults the proxy puts on the stream ([`StreamsProxy::chaos`]), in
/// thousandths: each record image is dropped (never shown) or shown twice,
/// each page is first answered cut short and asked again (its tail shows up
/// a read later), and `DescribeStream` lists the shards in another order
/// at every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chaos {
    pub seed: u64,
    pub drop: u64,
    pub duplicate: u64,
    pub delay: u64,
    pub shuffle: bool,
}

/// A deterministic hash of `seed` and `text` (splitmix64 over FNV-1a).
fn mix(seed: u64, text: &str) -> u64 {
    let mut h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    h ^= seed;
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A page of `GetRecords` (asked with `iterator`) under the proxy's chaos.
fn chaos_page(state: &State, target: &str, iterator: &str, response: Message) -> Message {
    let Some(chaos) = state.chaos.lock().ok().and_then(|c| *c) else {
        return response;
    };
    if target != "getrecords" || response.status() != Some(200) {
        return response;
    }
    let mut page: Value = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
    let Some(records) = page["Records"].as_array().cloned() else {
        return response;
    };
    let mut shown = Vec::new();
    for record in records {
        let seq = record["dynamodb"]["SequenceNumber"]
            .as_str()
            .unwrap_or_default();
        let h = mix(chaos.seed, seq);
        if h % 1000 < chaos.drop {
            continue;
        }
        if (h >> 16) % 1000 < chaos.duplicate {
            shown.push(record.clone());
        }
        shown.push(record);
    }
    let first_time = state
        .delayed
        .lock()
        .is_ok_and(|mut delayed| delayed.insert(iterator.to_owned()));
    if first_time && shown.len() > 1 && mix(chaos.seed, iterator) % 1000 < chaos.delay {
        // The tail is not visible yet: this page again, read later.
        shown.truncate(shown.len() / 2);
        page["NextShardIterator"] = Value::String(iterator.to_owned());
    }
    page["Records"] = Value::Array(shown);
    Message::from_bytes(ok_json(&page))
}

/// `shards` in another order, by the proxy's chaos and how many times the
/// stream was described.
fn shuffle_shards(state: &State, shards: &mut [Value]) {
    let Some(chaos) = state
        .chaos
        .lock()
        .ok()
        .and_then(|c| *c)
        .filter(|c| c.shuffle)
    else {
        return;
    };
    let call = state.descriptions.fetch_add(1, Ordering::SeqCst);
    let mut h = mix(chaos.seed, &call.to_string());
    for i in (1..shards.len()).rev() {
        h = mix(h, "shuffle");
        shards.swap(i, (h % (i as u64 + 1)) as usize);
    }
}

/// An answer to `GetRecords` without the hidden records' images.
fn hide_records(state: &State, target: &str, response: Message) -> Message {
    let hidden = state.hidden.lock().map(|h| h.clone()).unwrap_or_default();
    if hidden.is_empty() || target != "getrecords" || response.status() != Some(200) {
        return response;
    }
    let mut page: Value = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
    if let Some(records) = page["Records"].as_array_mut() {
        records.retain(|r| {
            r["dynamodb"]["Keys"]["id"]["S"]
                .as_str()
                .is_none_or(|id| !hidden.contains(id))
        });
    }
    Message::from_bytes(ok_json(&page))
}

/// Note the iterators of an answer (a trim expires them), and put a fresh
/// one behind the empty stretch when one is set.
fn remember_iterators(state: &State, target: &str, response: Message) -> Message {
    if response.status() != Some(200) || !matches!(target, "getsharditerator" | "getrecords") {
        return response;
    }
    let mut answer: Value = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
    let field = if target == "getrecords" {
        "NextShardIterator"
    } else {
        "ShardIterator"
    };
    let Some(iterator) = answer[field].as_str().map(str::to_owned) else {
        return response;
    };
    if let Ok(mut issued) = state.issued.lock() {
        issued.insert(iterator.clone());
    }
    let stretch = state.stretch.load(Ordering::SeqCst);
    if target != "getsharditerator" || stretch == 0 {
        return response;
    }
    answer[field] = Value::String(format!("{STRETCH}{stretch}:{iterator}"));
    Message::from_bytes(ok_json(&answer))
}

async fn serve(state: Arc<State>, client: TcpStream) -> std::io::Result<()> {
    let Some(upstream) = state.upstream else {
        return Ok(());
    };
    let (client_read, mut client_write) = client.into_split();
    let mut client_read = BufReader::new(client_read);
    let upstream = TcpStream::connect(upstream).await?;
    let (upstream_read, mut upstream_write) = upstream.into_split();
    let mut upstream_read = BufReader::new(upstream_read);
    while let Some(request) = read_message(&mut client_read).await? {
        let target = target(&request.head());
        let body: Value = serde_json::from_slice(request.body()).unwrap_or(Value::Null);
        let trimmed = state.trimmed_through.lock().ok().and_then(|t| t.clone());
        let closed_at = state.closed_at.lock().ok().and_then(|c| c.clone());
        if closed_at.is_some() {
            if target == "getsharditerator" && body["ShardId"] == CHILD_SHARD {
                let answer = serde_json::json!({ "ShardIterator": CHILD_ITERATOR });
                client_write.write_all(&ok_json(&answer)).await?;
                continue;
            }
            if target == "getrecords" && body["ShardIterator"] == CHILD_ITERATOR {
                // An open shard at the present: nothing yet, read on later.
                state.get_records.fetch_add(1, Ordering::SeqCst);
                let page = serde_json::json!({
                    "Records": [],
                    "NextShardIterator": CHILD_ITERATOR,
                });
                client_write.write_all(&ok_json(&page)).await?;
                continue;
            }
        }
        if state.failing_shard.load(Ordering::SeqCst) {
            if target == "getsharditerator" && body["ShardId"] == FAILING_SHARD {
                let answer = serde_json::json!({ "ShardIterator": FAILING_ITERATOR });
                client_write.write_all(&ok_json(&answer)).await?;
                continue;
            }
            if target == "getrecords" && body["ShardIterator"] == FAILING_ITERATOR {
                state.failed.fetch_add(1, Ordering::SeqCst);
                client_write
                    .write_all(&canned(
                        "400 Bad Request",
                        "ThrottlingException",
                        "Rate exceeded for shard (injected)",
                    ))
                    .await?;
                continue;
            }
        }
        if target == "getrecords" {
            let iterator = body["ShardIterator"].as_str().unwrap_or_default();
            if state.expired.lock().is_ok_and(|e| e.contains(iterator)) {
                client_write
                    .write_all(&canned(
                        "400 Bad Request",
                        "ExpiredIteratorException",
                        "Iterator expired (injected)",
                    ))
                    .await?;
                continue;
            }
            if let Some(page) = stretch_page(&state, iterator) {
                client_write.write_all(&ok_json(&page)).await?;
                continue;
            }
        }
        if target == "getrecords" {
            state.get_records.fetch_add(1, Ordering::SeqCst);
            if state.reads_before_failure.load(Ordering::SeqCst) == 0 {
                client_write.write_all(&injected_failure(&state)).await?;
                continue;
            }
            let empty = state
                .empty_pages
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if empty {
                state.empty_answered.fetch_add(1, Ordering::SeqCst);
                let page = serde_json::json!({
                    "Records": [],
                    "NextShardIterator": body["ShardIterator"],
                });
                client_write.write_all(&ok_json(&page)).await?;
                continue;
            }
        }
        if target == "getsharditerator" {
            let kind = body["ShardIteratorType"].as_str().unwrap_or_default();
            let sequence = body["SequenceNumber"].as_str();
            if let (Some(limit), Some(sequence)) = (&trimmed, sequence) {
                if kind.ends_with("SEQUENCE_NUMBER") && at_or_below(sequence, limit) {
                    state.trimmed_refusals.fetch_add(1, Ordering::SeqCst);
                    client_write
                        .write_all(&canned(
                            "400 Bad Request",
                            "TrimmedDataAccessException",
                            "The operation attempted to read past the oldest stream record in a shard (injected)",
                        ))
                        .await?;
                    continue;
                }
            }
        }
        upstream_write.write_all(&request.bytes).await?;
        let Some(response) = read_message(&mut upstream_read).await? else {
            return Ok(());
        };
        if target == "getrecords" && response.status() == Some(200) {
            // Only reads the engine answered are held back.
            let nth = state.answered.fetch_add(1, Ordering::SeqCst) + 1;
            let mut released = state.released.subscribe();
            while nth > state.hold_after.load(Ordering::SeqCst) {
                if released.changed().await.is_err() {
                    break;
                }
            }
            // Only reads the engine answered count toward a failure.
            let failing = state
                .reads_before_failure
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| match left {
                    u64::MAX => None,
                    0 => Some(0),
                    n => Some(n - 1),
                })
                .is_ok_and(|before| before == 0);
            if failing {
                client_write.write_all(&injected_failure(&state)).await?;
                continue;
            }
        }
        let response = remember_iterators(&state, &target, response);
        let asked = body["ShardIterator"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let response = hide_records(&state, &target, response);
        let response = chaos_page(&state, &target, &asked, response);
        let shuffled = state
            .chaos
            .lock()
            .is_ok_and(|c| c.is_some_and(|c| c.shuffle));
        if target == "describestream"
            && response.status() == Some(200)
            && (state.failing_shard.load(Ordering::SeqCst) || closed_at.is_some() || shuffled)
        {
            let mut described: Value =
                serde_json::from_slice(response.body()).unwrap_or(Value::Null);
            if let Some(shards) = described["StreamDescription"]["Shards"].as_array_mut() {
                if let Some(ending) = &closed_at {
                    let parent = shards
                        .first()
                        .and_then(|s| s["ShardId"].as_str())
                        .unwrap_or_default()
                        .to_owned();
                    for shard in shards.iter_mut() {
                        shard["SequenceNumberRange"]["EndingSequenceNumber"] =
                            Value::String(ending.clone());
                    }
                    if state.closed_gone.load(Ordering::SeqCst) {
                        shards.clear();
                    }
                    shards.push(serde_json::json!({
                        "ShardId": CHILD_SHARD,
                        "ParentShardId": parent,
                        "SequenceNumberRange": { "StartingSequenceNumber": ending },
                    }));
                }
                if state.failing_shard.load(Ordering::SeqCst) {
                    let at = if state.failing_last.load(Ordering::SeqCst) {
                        shards.len()
                    } else {
                        0
                    };
                    shards.insert(
                        at,
                        serde_json::json!({
                            "ShardId": FAILING_SHARD,
                            "SequenceNumberRange": { "StartingSequenceNumber": "1" },
                        }),
                    );
                }
                shuffle_shards(&state, shards);
            }
            client_write.write_all(&ok_json(&described)).await?;
            continue;
        }
        if let (Some(ending), "getrecords", Some(200)) =
            (&closed_at, target.as_str(), response.status())
        {
            // A closed shard: nothing past its ending sequence number, and
            // no next iterator once its records are read.
            let mut page: Value = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
            if let Some(records) = page["Records"].as_array_mut() {
                records.retain(|r| {
                    r["dynamodb"]["SequenceNumber"]
                        .as_str()
                        .is_some_and(|seq| at_or_below(seq, ending))
                        && trimmed.as_deref().is_none_or(|limit| {
                            r["dynamodb"]["SequenceNumber"]
                                .as_str()
                                .is_none_or(|seq| !at_or_below(seq, limit))
                        })
                });
                if records.is_empty() {
                    if let Some(page) = page.as_object_mut() {
                        page.remove("NextShardIterator");
                    }
                }
            }
            client_write.write_all(&ok_json(&page)).await?;
            continue;
        }
        match (&trimmed, target.as_str(), response.status()) {
            (Some(limit), "getrecords", Some(200)) => {
                let mut page: Value =
                    serde_json::from_slice(response.body()).unwrap_or(Value::Null);
                if let Some(records) = page["Records"].as_array_mut() {
                    records.retain(|r| {
                        r["dynamodb"]["SequenceNumber"]
                            .as_str()
                            .is_none_or(|seq| !at_or_below(seq, limit))
                    });
                }
                client_write.write_all(&ok_json(&page)).await?;
            }
            _ => client_write.write_all(&response.bytes).await?,
        }
    }
    Ok(())
}
