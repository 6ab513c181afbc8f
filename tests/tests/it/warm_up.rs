//! `Store::warm_up` on every engine: it opens the store's connection during
//! a function's init with exactly the request its documentation names, and
//! the store layers forward it.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::SharedInterceptor;
use lambda_idempotency::store::dynamodb::WARM_UP_RECORD_ID;
use lambda_idempotency::store::offload::S3Offload;
use lambda_idempotency::store::powertools::{PowertoolsCutover, PowertoolsRecords};
use lambda_idempotency::{DynamoStore, ErrorKind, PostgresStore, RedisStore, Store};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Every DynamoDB request the client sends: its operation (from the
/// `x-amz-target` header) and its JSON body.
type Recorded = integration_tests::RequestCounter;

/// A DynamoStore on a fresh table whose client records its requests.
async fn recorded_dynamo_store() -> (DynamoStore, String, Recorded) {
    let table = integration_tests::create_table(&integration_tests::client().await).await;
    let recorded = Recorded::default();
    let client =
        integration_tests::client_with(vec![SharedInterceptor::new(recorded.clone())]).await;
    let store = DynamoStore::builder(client, &table).open().unwrap();
    (store, table, recorded)
}

/// The one request a DynamoStore's warm-up sends: an eventually consistent
/// GetItem of the warm-up id on its table.
fn assert_one_warm_up_get_item(recorded: &Recorded, table: &str) {
    let requests = recorded.requests();
    assert_eq!(requests.len(), 1, "one request, got {requests:?}");
    let (target, body) = &requests[0];
    assert_eq!(target, "DynamoDB_20120810.GetItem");
    assert_eq!(
        body,
        &json!({"TableName": table, "Key": {"id": {"S": WARM_UP_RECORD_ID}}}),
        "no ConsistentRead (half a read unit), no other parameter"
    );
}

#[tokio::test]
async fn dynamodb_warm_up_is_one_eventually_consistent_get_item_of_the_warm_up_id() {
    let (store, table, recorded) = recorded_dynamo_store().await;
    store.warm_up().await.unwrap();
    assert_one_warm_up_get_item(&recorded, &table);
    assert_eq!(
        store.get(WARM_UP_RECORD_ID).await.unwrap(),
        None,
        "the warm-up wrote nothing"
    );
}

#[tokio::test]
async fn dynamodb_warm_up_on_an_unreachable_endpoint_fails_as_store_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = integration_tests::client_for(format!("http://127.0.0.1:{port}"), 1).await;
    let store = DynamoStore::builder(client, "nowhere").open().unwrap();
    let err = store.warm_up().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");
}

/// The layers forward the warm-up to the store they wrap: through
/// `Arc<dyn Store>`, the cut-over and the offload it is still one GetItem
/// of the DynamoStore's, and nothing of Powertools' table or of S3.
#[tokio::test]
async fn store_layers_forward_the_warm_up_to_the_store_they_wrap() {
    let (store, table, recorded) = recorded_dynamo_store().await;
    // An S3 client on a closed port: any request to it would fail the test.
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:9")
            .build(),
    );
    let offload = S3Offload::new(store.clone(), s3, "no-bucket");
    let records = PowertoolsRecords::new(
        store.client().clone(),
        "powertools-table-never-read",
        "app.handler",
        std::time::SystemTime::now() + std::time::Duration::from_secs(3600),
    );
    let layered: Arc<dyn Store> = Arc::new(PowertoolsCutover::new(offload, records));
    layered.warm_up().await.unwrap();
    assert_one_warm_up_get_item(&recorded, &table);
}

/// One command a client sent, as its words.
type Command = Vec<String>;

/// A fake Redis server on a free port: it answers `PING` with `PONG` and
/// every other command with `OK`, and records each command it is sent.
async fn recording_redis_server() -> (u16, Arc<Mutex<Vec<Command>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let commands = Arc::new(Mutex::new(Vec::new()));
    let seen = commands.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut read = BufReader::new(read);
                let mut line = String::new();
                // RESP: `*N` then N bulk strings `$len` + bytes.
                while read.read_line(&mut line).await.unwrap_or(0) > 0 {
                    let words: usize = line.trim_start_matches('*').trim().parse().unwrap();
                    let mut command = Vec::new();
                    for _ in 0..words {
                        line.clear();
                        read.read_line(&mut line).await.unwrap();
                        let len: usize = line.trim_start_matches('$').trim().parse().unwrap();
                        let mut word = vec![0; len + 2];
                        read.read_exact(&mut word).await.unwrap();
                        word.truncate(len);
                        command.push(String::from_utf8(word).unwrap());
                    }
                    let answer: &[u8] = if command[0].eq_ignore_ascii_case("PING") {
                        b"+PONG\r\n"
                    } else {
                        b"+OK\r\n"
                    };
                    seen.lock().unwrap().push(command);
                    write.write_all(answer).await.unwrap();
                    line.clear();
                }
            });
        }
    });
    (port, commands)
}

#[tokio::test]
async fn redis_warm_up_connects_a_store_opened_lazily_and_sends_one_ping() {
    let (port, commands) = recording_redis_server().await;
    let store = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
        .open()
        .unwrap();
    assert!(commands.lock().unwrap().is_empty(), "open() sends nothing");
    store.warm_up().await.unwrap();
    // The client's own set-up of a new connection (`CLIENT SETINFO` of its
    // name and version) is not the store's.
    let sent: Vec<Command> = commands
        .lock()
        .unwrap()
        .iter()
        .filter(|c| !(c[0].eq_ignore_ascii_case("CLIENT") && c[1].eq_ignore_ascii_case("SETINFO")))
        .cloned()
        .collect();
    assert_eq!(sent, vec![vec!["PING".to_owned()]]);
    assert_eq!(store.round_trips(), 0, "no operation of the store's");
}

/// On the real server and cluster (where `PING` is routed to the nodes),
/// the warm-up succeeds and is no operation of the store's; which command
/// it sends is the fake server's test above.
#[tokio::test]
async fn redis_warm_up_succeeds_on_a_real_server_and_cluster_without_counting_a_round_trip() {
    let cluster_url = std::env::var("IDEMPOTENCY_TEST_REDIS_CLUSTER_URL")
        .expect("IDEMPOTENCY_TEST_REDIS_CLUSTER_URL is set by scripts/redis-local.sh");
    for store in [
        RedisStore::builder(integration_tests::redis_url()).open(),
        RedisStore::builder(cluster_url).cluster().open(),
    ] {
        let store = store.unwrap();
        store.warm_up().await.unwrap();
        assert_eq!(store.round_trips(), 0, "{}", store.describe());
    }
}

#[tokio::test]
async fn redis_warm_up_of_an_unreachable_server_fails_as_store_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
        .open()
        .unwrap();
    let err = store.warm_up().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");
}

/// Directly and through PgBouncer: a store opened lazily has no connection;
/// after the warm-up its pool holds one, idle, and no statement was sent.
#[tokio::test]
async fn postgres_warm_up_opens_the_pools_first_connection_without_a_statement() {
    for url in [
        integration_tests::postgres_url(),
        integration_tests::postgres_pooler_url(),
    ] {
        let store = PostgresStore::builder(&url).open().unwrap();
        assert_eq!(store.pool().status().size, 0, "open() connects nothing");
        store.warm_up().await.unwrap();
        let status = store.pool().status();
        assert_eq!((status.size, status.available), (1, 1), "{url}");
        assert_eq!(store.round_trips(), 0, "{url}: no statement");
    }
}

#[tokio::test]
async fn postgres_warm_up_of_an_unreachable_server_fails_as_store_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = PostgresStore::builder(format!("postgres://u@127.0.0.1:{port}/db"))
        .open()
        .unwrap();
    let err = store.warm_up().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");
}

/// `orders-api`'s init as a process, metered on the way to DynamoDB Local:
/// with `IDEMPOTENCY_WARM_UP` unset (the default) it makes one read of its
/// idempotency table (half a read unit) before it asks for an invocation,
/// with `false` none; the orders table is not touched either way.
#[tokio::test]
async fn orders_api_warms_up_during_init_unless_told_not_to() {
    use integration_tests::capacity_proxy::CapacityProxy;
    use integration_tests::functions::{orders_env, spawn, tables};
    use integration_tests::runtime_api::RuntimeApi;
    use std::net::ToSocketAddrs;

    let upstream = integration_tests::endpoint()
        .trim_start_matches("http://")
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap();
    let bin = crate::process::function_bin("orders-api");
    for (setting, reads) in [(None, 1), (Some("false"), 0)] {
        let proxy = CapacityProxy::start(upstream).await.unwrap();
        let tables = tables().await.unwrap();
        let api = RuntimeApi::start().await.unwrap();
        let mut extra = vec![("AWS_ENDPOINT_URL_DYNAMODB", proxy.endpoint())];
        if let Some(value) = setting {
            extra.push(("IDEMPOTENCY_WARM_UP", value.to_owned()));
        }
        let extra: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let _process = spawn(bin.to_str().unwrap(), &orders_env(&api, &tables, &extra)).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while api.first_poll().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "orders-api did not finish its init"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let idempotency = proxy.units(&tables.0);
        assert_eq!(
            idempotency.requests, reads,
            "IDEMPOTENCY_WARM_UP={setting:?}"
        );
        assert_eq!(idempotency.reads(), 0.5 * reads as f64, "{idempotency:?}");
        assert_eq!(idempotency.writes(), 0.0, "{idempotency:?}");
        assert_eq!(proxy.units(&tables.1).requests, 0, "the orders table");
    }
}

/// A bad `IDEMPOTENCY_WARM_UP` stops `orders-api` at start, in one line
/// naming the variable, before it asks for any invocation.
#[tokio::test]
async fn a_bad_warm_up_setting_stops_orders_api_at_start_naming_it() {
    use integration_tests::runtime_api::RuntimeApi;
    let tables = integration_tests::functions::tables().await.unwrap();
    let api = RuntimeApi::start().await.unwrap();
    let env =
        integration_tests::functions::orders_env(&api, &tables, &[("IDEMPOTENCY_WARM_UP", "yes")]);
    let line = crate::process::refused_start("orders-api", &env).await;
    assert!(
        line.contains(
            "orders-api cannot start: IDEMPOTENCY_WARM_UP=\\\"yes\\\" is not a boolean: use true or false"
        ),
        "{line}"
    );
    assert_eq!(api.first_poll(), None, "no invocation was asked for");
}

/// `init::warm_up`, as the functions and the new-project template call it
/// during init: nothing when turned off (`IDEMPOTENCY_WARM_UP=false`), the
/// store's one warm-up request when on, and an unreachable store reported
/// (`false`, a warning logged) without stopping the function.
#[tokio::test]
async fn init_warm_up_sends_nothing_when_off_and_survives_an_unreachable_store() {
    use lambda_idempotency::init;
    let (store, table, recorded) = recorded_dynamo_store().await;
    assert!(!init::warm_up(&store, false).await, "off: not warmed");
    assert!(recorded.requests().is_empty(), "off: nothing sent");
    assert!(init::warm_up(&store, true).await, "on: warmed");
    assert_one_warm_up_get_item(&recorded, &table);

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let client = integration_tests::client_for(format!("http://127.0.0.1:{port}"), 1).await;
    let unreachable = DynamoStore::builder(client, "nowhere").open().unwrap();
    assert!(
        !init::warm_up(&unreachable, true).await,
        "unreachable: reported, not a panic or an error that stops the start"
    );
}

/// The store's calls override the client's configuration with their own
/// limits (docs/DESIGN.md, "Failing fast"), and the connection pool is
/// still the application's: after the warm-up, the application's own call
/// through its client opens no second connection. The client here is built
/// as `aws_config::load_from_env` builds one, with no HTTP client of its
/// own: a client derived from it (the first way this was built) got a
/// default HTTP client, and pool, of its own, and this test failed with 2
/// connections.
#[tokio::test]
async fn the_warm_up_opens_the_connection_the_applications_calls_use() {
    let upstream: std::net::SocketAddr = integration_tests::endpoint()
        .trim_start_matches("http://")
        .parse()
        .expect("DynamoDB Local at host:port");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = accepted.clone();
    let proxy = tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    let connections = || accepted.load(std::sync::atomic::Ordering::SeqCst);

    let table = integration_tests::create_table(&integration_tests::client().await).await;
    let client = integration_tests::client_for(format!("http://127.0.0.1:{port}"), 3).await;
    let store = DynamoStore::builder(client.clone(), &table).open().unwrap();
    store.warm_up().await.unwrap();
    assert_eq!(connections(), 1, "the warm-up opened one connection");
    store.get("0a1b").await.unwrap();
    assert_eq!(connections(), 1, "the store's next call used it");
    client
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    assert_eq!(
        connections(),
        1,
        "the application's call used the warm-up's connection"
    );
    proxy.abort();
}
