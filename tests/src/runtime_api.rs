//! A small Lambda Runtime API: real function binaries (`orders-api`, ...) run
//! as child processes and poll it exactly as they poll Lambda's, so benchmarks
//! and reliability runs exercise the real runtime interface, several processes
//! at once, and processes can be killed mid-invocation.
//!
//! Implements `GET /2018-06-01/runtime/invocation/next`,
//! `POST .../invocation/{id}/response`, `POST .../invocation/{id}/error` and
//! `POST .../init/error`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use lambda_idempotency::store::now_ms;
use tokio::sync::{mpsc, oneshot, Mutex};

/// What an invocation ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The function posted a response (its body).
    Response(Bytes),
    /// The function posted an error (its body).
    Error(Bytes),
    /// No answer within the timeout: the process died or hung.
    TimedOut,
}

struct Pending {
    id: String,
    payload: Bytes,
    deadline_ms: u64,
}

struct Shared {
    queue: Mutex<mpsc::UnboundedReceiver<Pending>>,
    waiting: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    /// Invocations queued and not yet handed to a process.
    queued: AtomicU64,
    /// When a process first asked for an invocation.
    first_poll: std::sync::OnceLock<std::time::Instant>,
}

/// A running Runtime API server.
#[derive(Clone)]
pub struct RuntimeApi {
    addr: SocketAddr,
    sender: mpsc::UnboundedSender<Pending>,
    shared: Arc<Shared>,
    next_id: Arc<AtomicU64>,
}

impl RuntimeApi {
    /// Start on a free loopback port.
    pub async fn start() -> std::io::Result<RuntimeApi> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            queue: Mutex::new(receiver),
            waiting: Mutex::new(HashMap::new()),
            queued: AtomicU64::new(0),
            first_poll: std::sync::OnceLock::new(),
        });
        let app = axum::Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(RuntimeApi {
            addr,
            sender,
            shared,
            next_id: Arc::new(AtomicU64::new(1)),
        })
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// The environment a function process needs to poll this API.
    pub fn function_env(&self, name: &str) -> Vec<(String, String)> {
        vec![
            ("AWS_LAMBDA_RUNTIME_API".into(), self.address()),
            ("AWS_LAMBDA_FUNCTION_NAME".into(), name.into()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(), "256".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION".into(), "$LATEST".into()),
            ("AWS_LAMBDA_LOG_STREAM_NAME".into(), "local".into()),
            (
                "AWS_LAMBDA_LOG_GROUP_NAME".into(),
                format!("/aws/lambda/{name}"),
            ),
        ]
    }

    /// When a process first asked for an invocation (`GET .../next`): where
    /// its init phase ended, as Lambda's init duration ends there.
    pub fn first_poll(&self) -> Option<std::time::Instant> {
        self.shared.first_poll.get().copied()
    }

    /// Invocations queued and not yet picked up by a process. An invocation
    /// whose caller timed out may still be queued and run later, as on Lambda.
    pub fn queued(&self) -> u64 {
        self.shared.queued.load(Ordering::SeqCst)
    }

    /// Invoke: queue `payload` for the next polling process and wait up to
    /// `timeout` for its answer. The deadline handed to the function is
    /// `timeout` from now, as Lambda's is its configured timeout.
    pub async fn invoke(&self, payload: impl Into<Bytes>, timeout: Duration) -> Outcome {
        let id = format!("inv-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.shared.waiting.lock().await.insert(id.clone(), tx);
        let deadline_ms = now_ms() + timeout.as_millis() as u64;
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        if self
            .sender
            .send(Pending {
                id: id.clone(),
                payload: payload.into(),
                deadline_ms,
            })
            .is_err()
        {
            return Outcome::TimedOut;
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(outcome)) => outcome,
            _ => {
                self.shared.waiting.lock().await.remove(&id);
                Outcome::TimedOut
            }
        }
    }
}

async fn next(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let _ = shared.first_poll.set(std::time::Instant::now());
    let pending = shared.queue.lock().await.recv().await;
    let Some(p) = pending else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            HeaderMap::new(),
            Bytes::new(),
        );
    };
    let mut headers = HeaderMap::new();
    let put = |h: &mut HeaderMap, k: &'static str, v: String| {
        if let Ok(v) = v.parse() {
            h.insert(k, v);
        }
    };
    put(&mut headers, "lambda-runtime-aws-request-id", p.id);
    put(
        &mut headers,
        "lambda-runtime-deadline-ms",
        p.deadline_ms.to_string(),
    );
    put(
        &mut headers,
        "lambda-runtime-invoked-function-arn",
        "arn:aws:lambda:us-east-1:123456789012:function:local".into(),
    );
    put(
        &mut headers,
        "lambda-runtime-trace-id",
        "Root=1-00000000-000000000000000000000000".into(),
    );
    (StatusCode::OK, headers, p.payload)
}

async fn finish(shared: &Shared, id: &str, outcome: Outcome) -> StatusCode {
    match shared.waiting.lock().await.remove(id) {
        Some(tx) => {
            let _ = tx.send(outcome);
            StatusCode::ACCEPTED
        }
        // Answered after its caller gave up (a killed-and-late invocation).
        None => StatusCode::BAD_REQUEST,
    }
}

async fn response(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> StatusCode {
    finish(&shared, &id, Outcome::Response(body)).await
}

async fn error(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> StatusCode {
    finish(&shared, &id, Outcome::Error(body)).await
}

async fn init_error(body: Bytes) -> StatusCode {
    eprintln!(
        "runtime api: function init error: {}",
        String::from_utf8_lossy(&body)
    );
    StatusCode::ACCEPTED
}
