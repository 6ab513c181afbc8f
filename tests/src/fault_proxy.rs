//! A fault-injecting HTTP proxy between Lambda functions and DynamoDB Local.
//!
//! Functions point `AWS_ENDPOINT_URL_DYNAMODB` at it. For each request it
//! draws a fault: pass through, answer a throttling error, answer a 500,
//! delay past the caller's SDK timeout, or forward the request and then drop
//! the connection without answering (the write happened; the caller never
//! learns it). Faults are counted by kind and can be switched off, so a run
//! can check that everything completes once they stop.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

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

/// A running proxy.
#[derive(Clone)]
pub struct FaultProxy {
    addr: SocketAddr,
    enabled: Arc<AtomicBool>,
    counts: Arc<FaultCounts>,
}

struct State {
    upstream: SocketAddr,
    plan: FaultPlan,
    enabled: Arc<AtomicBool>,
    counts: Arc<FaultCounts>,
    seed: AtomicU64,
}

impl FaultProxy {
    /// Start on a free loopback port, forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr, plan: FaultPlan) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let enabled = Arc::new(AtomicBool::new(true));
        let counts = Arc::new(FaultCounts::default());
        let state = Arc::new(State {
            upstream,
            plan,
            enabled: enabled.clone(),
            counts: counts.clone(),
            seed: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        });
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let state = state.clone();
                tokio::spawn(async move {
                    let _ = serve(state, client).await;
                });
            }
        });
        Ok(FaultProxy {
            addr,
            enabled,
            counts,
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

    /// What the proxy did so far.
    pub fn counts(&self) -> &FaultCounts {
        &self.counts
    }
}

impl State {
    /// A fault for the next request (xorshift: cheap and reproducible).
    fn draw(&self) -> Fault {
        if !self.enabled.load(Ordering::SeqCst) {
            return Fault::Pass;
        }
        let mut x = self
            .seed
            .fetch_add(0x6a09_e667_f3bc_c909, Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let roll = (x % 1000) as u32;
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
}

/// One HTTP/1.1 message: head (through the blank line) and body.
async fn read_message<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::new();
    loop {
        let mut line = Vec::new();
        if reader.read_until(b'\n', &mut line).await? == 0 {
            return Ok(None);
        }
        let blank = line == b"\r\n";
        head.extend_from_slice(&line);
        if blank {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await?;
    head.extend_from_slice(&body);
    Ok(Some(head))
}

fn canned(status: &str, error_type: &str, message: &str) -> Vec<u8> {
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
        let fault = state.draw();
        let counter = match fault {
            Fault::Pass => &state.counts.passed,
            Fault::Throttle => &state.counts.throttled,
            Fault::ServerError => &state.counts.server_errors,
            Fault::Delay => &state.counts.delayed,
            Fault::DropAfterSend => &state.counts.dropped_after_send,
        };
        counter.fetch_add(1, Ordering::Relaxed);
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
        upstream_write.write_all(&request).await?;
        let Some(response) = read_message(&mut upstream_read).await? else {
            return Ok(());
        };
        if fault == Fault::DropAfterSend {
            // The request took effect upstream; the caller never hears of it.
            return Ok(());
        }
        client_write.write_all(&response).await?;
    }
    Ok(())
}
