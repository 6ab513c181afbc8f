//! Records the AWS calls that the functions, the operator CLI and the
//! library's features make in the tests, for `scripts/check-iam.py`, which
//! evaluates each one against the IAM role the templates give its caller.
//!
//! A recording HTTP proxy sits in front of DynamoDB Local (tables and
//! streams) and in front of the local AWS server of `scripts/s3-local.sh`
//! (moto: S3, and Secrets Manager on the same port). It forwards every
//! byte unchanged and appends one JSON line per request to
//! `<target>/debug/iam-calls/<pid>.jsonl` (or `$IAM_CALLS_DIR`): who made it,
//! the service, the operation and what it touches (the DynamoDB request with
//! long strings cut, the S3 method, path and query).
//!
//! Who made a call is read from its SigV4 signature: every caller recorded
//! here signs with an access key id naming its role (`orders-api` signs as
//! `ordersapi`, `cli-read` as `cliread`: [`access_key`]), see
//! [`process_env`] and the clients below.
//! The harness's own calls (key `local`: tables made, records read back) are
//! not recorded. DynamoDB Local keeps one database for every key only with
//! `-sharedDb`, which `scripts/dynamodb-local.sh` passes.
//!
//! The proxies run on a thread of their own, so they outlive the runtime of
//! the test that first asked for them; they serve the test process until it
//! exits.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The access key of the harness's own calls, which are not recorded.
const HARNESS_KEY: &str = "local";

/// Strings longer than this are cut in the records (payloads, responses).
const KEEP_CHARS: usize = 160;

struct Recorder {
    dynamodb: String,
    aws: Option<String>,
}

static RECORDER: OnceLock<Result<Recorder, String>> = OnceLock::new();

fn recorder() -> &'static Recorder {
    match RECORDER.get_or_init(start) {
        Ok(recorder) => recorder,
        Err(e) => panic!("IAM call recorder: {e}"),
    }
}

/// `http://host:port` of an endpoint variable, resolved.
fn upstream(var: &str) -> Result<Option<SocketAddr>, String> {
    let Ok(url) = std::env::var(var) else {
        return Ok(None);
    };
    let authority = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{var}={url}: only http:// endpoints are recorded"))?
        .trim_end_matches('/');
    authority
        .to_socket_addrs()
        .map_err(|e| format!("{var}={url}: {e}"))?
        .next()
        .map(Some)
        .ok_or_else(|| format!("{var}={url}: no address"))
}

/// Where the records go: `$IAM_CALLS_DIR`, else `iam-calls/` in the
/// profile directory of the target directory this test binary is in.
pub fn calls_dir() -> Result<std::path::PathBuf, String> {
    if let Ok(dir) = std::env::var("IAM_CALLS_DIR") {
        return Ok(dir.into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("test binary path: {e}"))?;
    // target/<profile>/deps/<test binary>
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or_else(|| format!("{} is not in a target directory", exe.display()))?;
    Ok(profile.join("iam-calls"))
}

fn start() -> Result<Recorder, String> {
    let dynamodb = upstream("AWS_ENDPOINT_URL_DYNAMODB")?.ok_or(
        "AWS_ENDPOINT_URL_DYNAMODB is not set: run the tests through scripts/dynamodb-local.sh",
    )?;
    let aws = upstream("AWS_ENDPOINT_URL_S3")?;
    let dir = calls_dir()?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let path = dir.join(format!("{}.jsonl", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    let log = Arc::new(Mutex::new(file));

    let bind = || -> Result<std::net::TcpListener, String> {
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("nonblocking: {e}"))?;
        Ok(listener)
    };
    let mut listeners = vec![(bind()?, dynamodb)];
    if let Some(aws) = aws {
        listeners.push((bind()?, aws));
    }
    let endpoint = |l: &std::net::TcpListener| -> Result<String, String> {
        Ok(format!(
            "http://{}",
            l.local_addr().map_err(|e| format!("address: {e}"))?
        ))
    };
    let recorder = Recorder {
        dynamodb: endpoint(&listeners[0].0)?,
        aws: listeners.get(1).map(|(l, _)| endpoint(l)).transpose()?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    std::thread::Builder::new()
        .name("iam-record".into())
        .spawn(move || {
            runtime.block_on(async move {
                for (listener, upstream) in listeners {
                    let log = log.clone();
                    tokio::spawn(async move {
                        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                            eprintln!("IAM call recorder: cannot listen");
                            return;
                        };
                        while let Ok((client, _)) = listener.accept().await {
                            let log = log.clone();
                            tokio::spawn(async move {
                                if let Err(e) = serve(client, upstream, log).await {
                                    eprintln!("IAM call recorder: connection ended: {e}");
                                }
                            });
                        }
                    });
                }
                std::future::pending::<()>().await
            })
        })
        .map_err(|e| format!("thread: {e}"))?;
    Ok(recorder)
}

/// The access key id a recorded `principal` signs with: its name without
/// what is not a letter or a digit (DynamoDB Local refuses other keys).
pub fn access_key(principal: &str) -> String {
    principal
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

/// The recording endpoint in front of DynamoDB Local (tables and streams).
pub fn dynamodb_endpoint() -> String {
    recorder().dynamodb.clone()
}

/// The recording endpoint in front of the local S3 server, when the tests
/// run with one (`scripts/s3-local.sh`).
pub fn s3_endpoint() -> Option<String> {
    recorder().aws.clone()
}

/// The environment that makes a function process (or a CLI run) a recorded
/// `principal`: its access key, and its DynamoDB, streams and S3 endpoints
/// through the recorder.
pub fn process_env(principal: &str) -> Vec<(String, String)> {
    let mut env = vec![
        ("AWS_ACCESS_KEY_ID".to_owned(), access_key(principal)),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), "local".to_owned()),
        ("AWS_ENDPOINT_URL_DYNAMODB".to_owned(), dynamodb_endpoint()),
    ];
    // The local AWS server of scripts/s3-local.sh (moto) serves S3 and
    // Secrets Manager on one port.
    if let Some(aws) = s3_endpoint() {
        env.push(("AWS_ENDPOINT_URL_S3".to_owned(), aws.clone()));
        env.push(("AWS_ENDPOINT_URL_SECRETS_MANAGER".to_owned(), aws));
    }
    env
}

async fn shared_config(principal: &str) -> aws_config::SdkConfig {
    aws_config::from_env()
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            access_key(principal),
            "local",
            None,
            None,
            "iam-record",
        ))
        .load()
        .await
}

/// A DynamoDB client whose calls are recorded as `principal`'s.
pub async fn dynamodb_client(principal: &str) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(&shared_config(principal).await)
        .endpoint_url(dynamodb_endpoint())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// A DynamoDB Streams configuration (no endpoint chosen yet, as a function
/// builds it) whose calls are recorded as `principal`'s when sent to
/// [`dynamodb_endpoint`].
pub async fn streams_config(principal: &str) -> aws_sdk_dynamodbstreams::config::Builder {
    aws_sdk_dynamodbstreams::config::Builder::from(&shared_config(principal).await)
}

/// An S3 client config (path style) whose calls are recorded as
/// `principal`'s; panics when the tests run without a local S3 server.
pub async fn s3_config(principal: &str) -> aws_sdk_s3::config::Builder {
    let endpoint = s3_endpoint().unwrap_or_else(|| {
        panic!("AWS_ENDPOINT_URL_S3 is not set: run the tests through scripts/s3-local.sh")
    });
    aws_sdk_s3::config::Builder::from(&shared_config(principal).await)
        .endpoint_url(endpoint)
        .force_path_style(true)
}

/// One request read from the client: its head, the bytes to forward, and
/// its body (de-chunked).
struct Request {
    head: String,
    raw: Vec<u8>,
    body: Vec<u8>,
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    raw: &mut Vec<u8>,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line).await? == 0 {
        return Ok(None);
    }
    raw.extend_from_slice(&line);
    Ok(Some(line))
}

async fn read_request<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<Request>> {
    let eof = || std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "request cut short");
    let mut raw = Vec::new();
    loop {
        let Some(line) = read_line(reader, &mut raw).await? else {
            return if raw.is_empty() { Ok(None) } else { Err(eof()) };
        };
        if line == b"\r\n" {
            break;
        }
    }
    let head = String::from_utf8_lossy(&raw).into_owned();
    let mut body = Vec::new();
    let chunked = header(&head, "transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            let line = read_line(reader, &mut raw).await?.ok_or_else(eof)?;
            let text = String::from_utf8_lossy(&line);
            let size_text = text.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("chunk size: {e}"))
            })?;
            if size == 0 {
                // Trailers, then the blank line.
                while read_line(reader, &mut raw).await?.ok_or_else(eof)? != b"\r\n" {}
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).await?;
            raw.extend_from_slice(&chunk);
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        let length = header(&head, "content-length")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut bytes = vec![0; length];
        reader.read_exact(&mut bytes).await?;
        raw.extend_from_slice(&bytes);
        body = bytes;
    }
    Ok(Some(Request { head, raw, body }))
}

async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    log: Arc<Mutex<std::fs::File>>,
) -> std::io::Result<()> {
    let upstream = TcpStream::connect(upstream).await?;
    let (upstream_read, mut upstream_write) = upstream.into_split();
    let (client_read, mut client_write) = client.into_split();
    // Answers go back byte for byte, whatever their framing.
    let answers = tokio::spawn(async move {
        let mut upstream_read = upstream_read;
        tokio::io::copy(&mut upstream_read, &mut client_write).await
    });
    let mut client_read = BufReader::new(client_read);
    while let Some(request) = read_request(&mut client_read).await? {
        if let Some(line) = record(&request) {
            if let Ok(mut file) = log.lock() {
                writeln!(file, "{line}")?;
            }
        }
        upstream_write.write_all(&request.raw).await?;
    }
    upstream_write.shutdown().await?;
    answers.await.map_err(std::io::Error::other)??;
    Ok(())
}

/// The access key id and the service of a SigV4 `Authorization` header.
fn credential(head: &str) -> Option<(String, String)> {
    let auth = header(head, "authorization")?;
    let scope = auth.split("Credential=").nth(1)?.split(',').next()?;
    let mut parts = scope.split('/');
    let key = parts.next()?.to_owned();
    let service = parts.nth(2)?.to_owned();
    Some((key, service))
}

/// Long strings cut, so the records stay small.
fn trimmed(value: Value) -> Value {
    match value {
        Value::String(s) if s.chars().count() > KEEP_CHARS => {
            let kept: String = s.chars().take(KEEP_CHARS).collect();
            Value::String(format!("{kept}...({} chars)", s.chars().count()))
        }
        Value::Array(items) => Value::Array(items.into_iter().map(trimmed).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, trimmed(v))).collect())
        }
        other => other,
    }
}

/// The JSON line of one request, or None for the harness's own calls.
fn record(request: &Request) -> Option<String> {
    let (principal, service) = credential(&request.head)?;
    if principal == HARNESS_KEY {
        return None;
    }
    let mut first = request.head.lines().next()?.split_whitespace();
    let method = first.next()?.to_owned();
    let target_uri = first.next()?.to_owned();
    let (path, query) = target_uri
        .split_once('?')
        .map_or((target_uri.clone(), String::new()), |(p, q)| {
            (p.to_owned(), q.to_owned())
        });
    let target = header(&request.head, "x-amz-target").map(str::to_owned);
    let body = if target.is_some() {
        serde_json::from_slice::<Value>(&request.body)
            .map(trimmed)
            .unwrap_or(Value::Null)
    } else if method == "POST" {
        // S3's multi-object delete names its keys in an XML body.
        Value::String(
            String::from_utf8_lossy(&request.body)
                .chars()
                .take(4096)
                .collect(),
        )
    } else {
        Value::Null
    };
    Some(
        json!({
            "principal": principal,
            "service": service,
            "target": target,
            "method": method,
            "path": path,
            "query": query,
            "body": body,
        })
        .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caller_is_the_access_key_of_the_signature() {
        let head = "POST / HTTP/1.1\r\nauthorization: AWS4-HMAC-SHA256 Credential=sweeper/20261125/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00\r\n\r\n";
        assert_eq!(
            credential(head),
            Some(("sweeper".to_owned(), "dynamodb".to_owned()))
        );
        assert_eq!(credential("GET / HTTP/1.1\r\n\r\n"), None);
    }

    #[test]
    fn long_strings_are_cut_short_ones_kept() {
        let long = "x".repeat(1000);
        let cut = trimmed(json!({"Item": {"id": {"S": "abc"}, "response": {"S": long}}}));
        assert_eq!(cut["Item"]["id"]["S"], "abc");
        let response = cut["Item"]["response"]["S"].as_str().unwrap_or_default();
        assert!(response.ends_with("...(1000 chars)"), "{response}");
    }

    #[tokio::test]
    async fn chunked_and_sized_bodies_are_read_whole() {
        let wire = b"PUT /b/k HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nGET /b/k HTTP/1.1\r\ncontent-length: 2\r\n\r\nhi";
        let mut reader = BufReader::new(&wire[..]);
        let first = read_request(&mut reader).await.unwrap().unwrap();
        assert_eq!(first.body, b"abcde");
        let second = read_request(&mut reader).await.unwrap().unwrap();
        assert_eq!(second.body, b"hi");
        assert_eq!(first.raw.len() + second.raw.len(), wire.len());
        assert!(read_request(&mut reader).await.unwrap().is_none());
    }
}
