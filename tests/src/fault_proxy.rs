//! A fault-injecting HTTP proxy between Lambda functions and DynamoDB Local.
//!
//! Functions point `AWS_ENDPOINT_URL_DYNAMODB` at it. For each request it
//! draws a fault: pass through, answer a throttling error, answer a 500,
//! delay past the caller's SDK timeout, or forward the request and then drop
//! the connection without answering (the write happened; the caller never
//! learns it). Faults are counted by kind and can be switched off, so a run
//! can check that everything completes once they stop.
//!
//! The proxy reads each request body, so it also knows what the request was
//! for ([`Operation`]: a claim, a completion, anything else), counts faults
//! per operation, and follows every completion (one per lease: record id and
//! owner token) to tell a completion that was stored but never acknowledged
//! (its answer dropped or late) from one that was never stored at all (a
//! lost completion: the record stays in progress and its key runs again).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lambda_idempotency::{store::dynamodb::schema, store::Status};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// What happens to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forwarded, answer returned.
    Pass,
    /// `400 ThrottlingException` (the SDK retries with backoff).
    Throttle,
    /// `500 InternalServerError` (the SDK retries).
    ServerError,
    /// Held past the caller's attempt timeout, then forwarded.
    Delay,
    /// Forwarded, then the connection is closed without the answer.
    DropAfterSend,
}

/// What a request asks of the idempotency table, read from its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// The claim: an `UpdateItem` whose condition admits an absent item
    /// (`attribute_not_exists`).
    Claim,
    /// A completion: an `UpdateItem`, or a `TransactWriteItems` holding an
    /// update, that sets the status to `COMPLETED`.
    Completion,
    /// Anything else (release, recovery points, reads, other tables).
    Other,
}

/// Probabilities (per mille) of each fault, and the delay used by `Delay`.
#[derive(Debug, Clone, Copy)]
pub struct FaultPlan {
    /// Throttling errors per 1000 requests.
    pub throttle: u32,
    /// 500s per 1000 requests.
    pub server_error: u32,
    /// Delays per 1000 requests.
    pub delay: u32,
    /// Dropped-after-send per 1000 requests.
    pub drop_after_send: u32,
    /// Completions per 1000 whose every request is answered with a 500 (an
    /// outage of that one write, longer than the SDK's retries): the
    /// completion is lost, the record stays in progress.
    pub lose_completion: u32,
    /// How long a delayed request is held.
    pub delay_for: Duration,
}

/// Counts of what the proxy did.
#[derive(Debug, Default)]
pub struct FaultCounts {
    /// Requests forwarded normally.
    pub passed: AtomicU64,
    /// Throttling answers.
    pub throttled: AtomicU64,
    /// 500 answers.
    pub server_errors: AtomicU64,
    /// Delayed requests.
    pub delayed: AtomicU64,
    /// Requests forwarded whose answer was dropped.
    pub dropped_after_send: AtomicU64,
}

impl FaultCounts {
    fn of(&self, fault: Fault) -> &AtomicU64 {
        match fault {
            Fault::Pass => &self.passed,
            Fault::Throttle => &self.throttled,
            Fault::ServerError => &self.server_errors,
            Fault::Delay => &self.delayed,
            Fault::DropAfterSend => &self.dropped_after_send,
        }
    }

    /// How many requests met `fault`.
    pub fn get(&self, fault: Fault) -> u64 {
        self.of(fault).load(Ordering::Relaxed)
    }
}

/// One completion (one lease: record and owner) as the proxy saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletionTrace {
    /// The record (`id` of the idempotency table).
    pub record_id: String,
    /// Owner token of the lease the completion was fenced on.
    pub owner: String,
    /// Requests (SDK attempts) that carried it.
    pub requests: u32,
    /// Faults injected on those requests (anything but `Pass`).
    pub faulted: u32,
    /// DynamoDB applied it: some forwarded request was answered `200`.
    pub stored: bool,
    /// The caller heard so: a `200` reached it (not dropped, not late).
    pub acknowledged: bool,
    /// Chosen to be lost ([`FaultPlan::lose_completion`]): every request
    /// answered with a 500 while faults are on.
    pub doomed: bool,
}

/// A running proxy.
#[derive(Clone)]
pub struct FaultProxy {
    addr: SocketAddr,
    enabled: Arc<AtomicBool>,
    state: Arc<State>,
}

struct State {
    upstream: SocketAddr,
    plan: FaultPlan,
    enabled: Arc<AtomicBool>,
    counts: FaultCounts,
    claims: FaultCounts,
    completions: FaultCounts,
    others: FaultCounts,
    traces: Mutex<HashMap<(String, String), CompletionTrace>>,
    seed: AtomicU64,
}

impl FaultProxy {
    /// Start on a free loopback port, forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr, plan: FaultPlan) -> std::io::Result<FaultProxy> {
        let enabled = Arc::new(AtomicBool::new(true));
        let state = Arc::new(State {
            upstream,
            plan,
            enabled: enabled.clone(),
            counts: FaultCounts::default(),
            claims: FaultCounts::default(),
            completions: FaultCounts::default(),
            others: FaultCounts::default(),
            traces: Mutex::new(HashMap::new()),
            seed: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        });
        let addr = crate::serve_on_loopback(state.clone(), serve).await?;
        Ok(FaultProxy {
            addr,
            enabled,
            state,
        })
    }

    /// `http://host:port`, for `AWS_ENDPOINT_URL_DYNAMODB`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Switch fault injection on or off (off = pure pass-through).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// What the proxy did so far, all requests.
    pub fn counts(&self) -> &FaultCounts {
        &self.state.counts
    }

    /// What the proxy did so far to the requests of one operation.
    pub fn counts_for(&self, operation: Operation) -> &FaultCounts {
        match operation {
            Operation::Claim => &self.state.claims,
            Operation::Completion => &self.state.completions,
            Operation::Other => &self.state.others,
        }
    }

    /// Every completion seen so far, one per lease.
    pub fn completions(&self) -> Vec<CompletionTrace> {
        self.state
            .traces
            .lock()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default()
    }
}

impl State {
    /// A number in 0..1000 (xorshift: cheap and reproducible).
    fn roll(&self) -> u32 {
        let mut x = self
            .seed
            .fetch_add(0x6a09_e667_f3bc_c909, Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % 1000) as u32
    }

    /// A fault for the next request.
    fn draw(&self) -> Fault {
        if !self.enabled.load(Ordering::SeqCst) {
            return Fault::Pass;
        }
        let roll = self.roll();
        let p = self.plan;
        let mut edge = p.throttle;
        if roll < edge {
            return Fault::Throttle;
        }
        edge += p.server_error;
        if roll < edge {
            return Fault::ServerError;
        }
        edge += p.delay;
        if roll < edge {
            return Fault::Delay;
        }
        edge += p.drop_after_send;
        if roll < edge {
            return Fault::DropAfterSend;
        }
        Fault::Pass
    }

    fn count(&self, operation: Operation, fault: Fault) {
        self.counts.of(fault).fetch_add(1, Ordering::Relaxed);
        let by_operation = match operation {
            Operation::Claim => &self.claims,
            Operation::Completion => &self.completions,
            Operation::Other => &self.others,
        };
        by_operation.of(fault).fetch_add(1, Ordering::Relaxed);
    }

    /// The fault for a request carrying the completion of `lease`, which
    /// is followed from its first request on (when it may be doomed).
    fn draw_completion(&self, lease: &(String, String)) -> Fault {
        let enabled = self.enabled.load(Ordering::SeqCst);
        let doomed = {
            let Ok(mut traces) = self.traces.lock() else {
                return self.draw();
            };
            let trace = traces
                .entry(lease.clone())
                .or_insert_with(|| CompletionTrace {
                    record_id: lease.0.clone(),
                    owner: lease.1.clone(),
                    doomed: enabled && self.roll() < self.plan.lose_completion,
                    ..CompletionTrace::default()
                });
            trace.doomed
        };
        let fault = if doomed && enabled {
            Fault::ServerError
        } else {
            self.draw()
        };
        if let Ok(mut traces) = self.traces.lock() {
            if let Some(trace) = traces.get_mut(lease) {
                trace.requests += 1;
                trace.faulted += u32::from(fault != Fault::Pass);
            }
        }
        fault
    }

    /// A completion's request was forwarded and DynamoDB answered `status`.
    fn answered(&self, lease: &(String, String), fault: Fault, status: Option<u16>) {
        if status != Some(200) {
            return;
        }
        if let Some(trace) = self
            .traces
            .lock()
            .ok()
            .as_mut()
            .and_then(|t| t.get_mut(lease))
        {
            trace.stored = true;
            trace.acknowledged |= fault == Fault::Pass;
        }
    }
}

/// One HTTP/1.1 message: head (through the blank line), then body.
pub(crate) struct Message {
    pub(crate) bytes: Vec<u8>,
    body_start: usize,
}

impl Message {
    pub(crate) fn head(&self) -> String {
        String::from_utf8_lossy(&self.bytes[..self.body_start]).to_ascii_lowercase()
    }

    pub(crate) fn body(&self) -> &[u8] {
        &self.bytes[self.body_start..]
    }

    /// A message made of whole `bytes` (head, blank line, body).
    pub(crate) fn from_bytes(bytes: Vec<u8>) -> Message {
        let body_start = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(bytes.len(), |at| at + 4);
        Message { bytes, body_start }
    }

    /// The status code of a response.
    pub(crate) fn status(&self) -> Option<u16> {
        self.head().split_whitespace().nth(1)?.parse().ok()
    }
}

pub(crate) async fn read_message<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<Message>> {
    let mut bytes = Vec::new();
    loop {
        let mut line = Vec::new();
        if reader.read_until(b'\n', &mut line).await? == 0 {
            return Ok(None);
        }
        let blank = line == b"\r\n";
        bytes.extend_from_slice(&line);
        if blank {
            break;
        }
    }
    let body_start = bytes.len();
    let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    let length = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await?;
    bytes.extend_from_slice(&body);
    Ok(Some(Message { bytes, body_start }))
}

/// What a DynamoDB request (its lower-cased head and its body) is for; for a
/// completion, also its lease (record id, owner token).
pub fn classify(head: &str, body: &[u8]) -> (Operation, Option<(String, String)>) {
    let target = head
        .lines()
        .find_map(|l| l.strip_prefix("x-amz-target:"))
        .map(str::trim)
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or_default();
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return (Operation::Other, None);
    };
    let updates: Vec<&Value> = match target {
        "updateitem" => vec![&request],
        "transactwriteitems" => request["TransactItems"]
            .as_array()
            .map(|items| items.iter().map(|i| &i["Update"]).collect())
            .unwrap_or_default(),
        _ => return (Operation::Other, None),
    };
    for update in updates {
        let condition = update["ConditionExpression"].as_str().unwrap_or_default();
        if target == "updateitem" && condition.contains("attribute_not_exists(") {
            return (Operation::Claim, None);
        }
        let sets = set_clause(update["UpdateExpression"].as_str().unwrap_or_default());
        let completes = comparisons(update, sets, ",").any(|(name, value)| {
            name == schema::STATUS && value["S"] == Status::Completed.as_str()
        });
        if completes {
            let id = update["Key"][schema::ID]["S"].as_str().unwrap_or_default();
            let owner = comparisons(update, condition, " AND ")
                .find(|(name, _)| *name == schema::OWNER)
                .and_then(|(_, value)| value["S"].as_str())
                .unwrap_or_default();
            return (
                Operation::Completion,
                Some((id.to_owned(), owner.to_owned())),
            );
        }
    }
    (Operation::Other, None)
}

/// The `SET` clause of an update expression (up to its next clause).
fn set_clause(expression: &str) -> &str {
    let Some(start) = expression.find("SET ") else {
        return "";
    };
    let rest = &expression[start + 4..];
    let end = [" REMOVE ", " ADD ", " DELETE "]
        .iter()
        .filter_map(|k| rest.find(k))
        .min()
        .unwrap_or(rest.len());
    &rest[..end]
}

/// `name = value` pairs of an expression split on `separator`, with the
/// `#name` and `:value` placeholders resolved from the request.
fn comparisons<'a>(
    update: &'a Value,
    expression: &'a str,
    separator: &'a str,
) -> impl Iterator<Item = (&'a str, &'a Value)> + 'a {
    expression.split(separator).filter_map(move |part| {
        let (left, right) = part.split_once('=')?;
        let left = left.trim().trim_start_matches('(');
        let right = right.trim().trim_end_matches(')');
        let name = update["ExpressionAttributeNames"][left]
            .as_str()
            .unwrap_or(left);
        let value = update["ExpressionAttributeValues"].get(right)?;
        Some((name, value))
    })
}

pub(crate) fn canned(status: &str, error_type: &str, message: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{error_type}","message":"{message}"}}"#
    );
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.0\r\nx-amzn-errortype: {error_type}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn serve(state: Arc<State>, client: TcpStream) -> std::io::Result<()> {
    let (client_read, mut client_write) = client.into_split();
    let mut client_read = BufReader::new(client_read);
    let upstream = TcpStream::connect(state.upstream).await?;
    let (upstream_read, mut upstream_write) = upstream.into_split();
    let mut upstream_read = BufReader::new(upstream_read);
    while let Some(request) = read_message(&mut client_read).await? {
        let (operation, lease) = classify(&request.head(), request.body());
        let fault = match &lease {
            Some(lease) => state.draw_completion(lease),
            None => state.draw(),
        };
        state.count(operation, fault);
        match fault {
            Fault::Throttle => {
                client_write
                    .write_all(&canned(
                        "400 Bad Request",
                        "ThrottlingException",
                        "Rate of requests exceeds the allowed throughput (injected)",
                    ))
                    .await?;
                continue;
            }
            Fault::ServerError => {
                client_write
                    .write_all(&canned(
                        "500 Internal Server Error",
                        "InternalServerError",
                        "Internal server error (injected)",
                    ))
                    .await?;
                continue;
            }
            Fault::Delay => tokio::time::sleep(state.plan.delay_for).await,
            Fault::Pass | Fault::DropAfterSend => {}
        }
        upstream_write.write_all(&request.bytes).await?;
        let Some(response) = read_message(&mut upstream_read).await? else {
            return Ok(());
        };
        if let Some(lease) = &lease {
            state.answered(lease, fault, response.status());
        }
        if fault == Fault::DropAfterSend {
            // The request took effect upstream; the caller never hears of it.
            return Ok(());
        }
        client_write.write_all(&response.bytes).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn head(target: &str) -> String {
        format!("post / http/1.1\r\nx-amz-target: dynamodb_20120810.{target}\r\n\r\n")
    }

    fn fenced(update: &str, extra: Value) -> Value {
        let mut v = json!({
            "TableName": "t",
            "Key": {"id": {"S": "ab12"}},
            "ConditionExpression": "#status = :in_progress AND #attempt = :attempt AND #owner = :owner",
            "UpdateExpression": update,
            "ExpressionAttributeNames": {"#status": "status", "#attempt": "attempt", "#owner": "owner", "#checkpoint": "checkpoint", "#rs": "response_status"},
            "ExpressionAttributeValues": {":in_progress": {"S": "IN_PROGRESS"}, ":attempt": {"N": "2"}, ":owner": {"S": "own-1"}},
        });
        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            for (k, x) in extra {
                v["ExpressionAttributeValues"]
                    .as_object_mut()
                    .map(|m| m.insert(k.clone(), x.clone()));
            }
        }
        v
    }

    #[test]
    fn claims_completions_and_the_rest_are_told_apart() {
        let claim = json!({
            "Key": {"id": {"S": "ab12"}},
            "ConditionExpression": "attribute_not_exists(#id) OR #expires_at < :now_s",
            "UpdateExpression": "SET #status = :in_progress, #attempt = if_not_exists(#attempt, :zero) + :one",
            "ExpressionAttributeNames": {"#status": "status", "#id": "id"},
            "ExpressionAttributeValues": {":in_progress": {"S": "IN_PROGRESS"}},
        });
        let body = |v: &Value| serde_json::to_vec(v).unwrap();
        assert_eq!(
            classify(&head("updateitem"), &body(&claim)),
            (Operation::Claim, None)
        );
        let complete = fenced(
            "SET #status = :completed, #rs = :rs REMOVE #checkpoint",
            json!({":completed": {"S": "COMPLETED"}, ":rs": {"N": "201"}}),
        );
        let lease = Some(("ab12".to_owned(), "own-1".to_owned()));
        assert_eq!(
            classify(&head("updateitem"), &body(&complete)),
            (Operation::Completion, lease.clone())
        );
        let transaction =
            json!({"TransactItems": [{"Update": complete}, {"Put": {"TableName": "orders"}}]});
        assert_eq!(
            classify(&head("transactwriteitems"), &body(&transaction)),
            (Operation::Completion, lease)
        );
        // A recovery point, a release and a read are none of the two; nor is
        // a write that stores the word COMPLETED in another attribute.
        let checkpoint = fenced(
            "SET #checkpoint = :checkpoint",
            json!({":checkpoint": {"M": {}}}),
        );
        let elsewhere = fenced(
            "SET #rs = :completed",
            json!({":completed": {"S": "COMPLETED"}}),
        );
        for (target, request) in [
            ("updateitem", checkpoint),
            ("updateitem", elsewhere),
            ("deleteitem", fenced("", json!({}))),
            ("getitem", json!({"Key": {"id": {"S": "ab12"}}})),
        ] {
            assert_eq!(
                classify(&head(target), &body(&request)),
                (Operation::Other, None)
            );
        }
        assert_eq!(
            classify(&head("updateitem"), b"not json"),
            (Operation::Other, None)
        );
    }
}
