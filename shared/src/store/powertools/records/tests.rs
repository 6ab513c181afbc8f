use super::*;
use serde_json::json;

fn records() -> PowertoolsRecords {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .build();
    PowertoolsRecords::new(
        Client::from_conf(config),
        "t",
        "fn.app.handler",
        UNIX_EPOCH + Duration::from_secs(2_000_000_000),
    )
}

#[test]
fn ids_hash_the_key_as_python_dumps_it() {
    // CPython: hashlib.md5(json.dumps("abc", sort_keys=True).encode()).hexdigest()
    assert_eq!(
        records().record_id(&json!("abc")),
        "fn.app.handler#ebd9f4c7b06cb0aaf5d13d80e49d8b90"
    );
    // ... and of {"b": 1, "a": [1.5, "é"]}
    assert_eq!(
        records().record_id(&json!({"b": 1, "a": [1.5, "é"]})),
        "fn.app.handler#1e7f1627a5947fe9c56251e6be2b9d03"
    );
    assert_eq!(
        records()
            .hash_function(PowertoolsHash::Sha256)
            .record_id(&json!("abc")),
        "fn.app.handler#6cc43f858fbb763301637b5af970e2a46b46f461f27e5a0f41e009c59b827b25"
    );
}

/// The ids and validation hashes Powertools 3.37.0 (the version
/// scripts/bench/requirements.txt pins) computed for API Gateway events,
/// configured with `event_key_jmespath='headers."idempotency-key"'`,
/// `payload_validation_jmespath="body"` and prefix `fn.app.handler`;
/// printed by its `_get_hashed_idempotency_key` and `_get_hashed_payload`.
#[cfg(feature = "http")]
#[test]
fn http_requests_hash_as_powertools_hashed_their_events() {
    let r = records();
    // The HTTP entry point describes the header by its text as sent
    // (`ClaimOrigin::Http`).
    let key = |text: &'static str| r.record_id(&serde_json::Value::String(text.to_owned()));
    // {"headers": {"idempotency-key": "k1"}}
    assert_eq!(key("k1"), "fn.app.handler#b0c5b121e7cb24f7ce362a75c65bdbe7");
    // {"headers": {"idempotency-key": "\"k1\""}}: the quotes are hashed.
    assert_eq!(
        key("\"k1\""),
        "fn.app.handler#d17830d256019f08a6b2225188c41dea"
    );
    // The body as the API Gateway event held it.
    let body = |body: lambda_http::Body| {
        let req = http::Request::post("/").body(body).expect("request");
        r.hash_of(&crate::http::event::of(&req)["body"])
    };
    // "body": "{\"amount\":2500}"
    assert_eq!(
        body(lambda_http::Body::from(r#"{"amount":2500}"#)),
        "99ab83bd956d8218b8ffac54eb065f28"
    );
    // "body": null, or no "body"
    assert_eq!(
        body(lambda_http::Body::Empty),
        "37a6259cc0c1dae299a7866489dff0bd"
    );
    // "body": ""
    assert_eq!(
        body(lambda_http::Body::from("")),
        "9d4568c009d203ab10e33ea9953a0264"
    );
    // "body": "AJ+SlgEC", "isBase64Encoded": true
    assert_eq!(
        body(lambda_http::Body::from(vec![0u8, 159, 146, 150, 1, 2])),
        "f8284f40044c44939f08e423d5500e5b"
    );
}

#[test]
fn a_record_is_read_as_powertools_reads_it() {
    let r = records();
    let item = |pairs: &[(&str, AttributeValue)]| -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    let n = |v: u64| AttributeValue::N(v.to_string());
    let s = |v: &str| AttributeValue::S(v.into());
    let now = 1_000_000_000_000;
    let completed = item(&[
        ("status", s("COMPLETED")),
        ("data", s(r#"{"statusCode": 201}"#)),
        ("expiration", n(now / 1000 + 60)),
    ]);
    assert_eq!(
        r.decode("x", &completed, now).unwrap(),
        Some(PowertoolsRecord::Completed {
            data: r#"{"statusCode": 201}"#.into(),
            expires_at_s: now / 1000 + 60,
            validation: None
        })
    );
    // Powertools keeps it through its second `expiration`
    // (`int(now) > expiration` is its test) and not a millisecond past.
    let expiration_ms = (now / 1000 + 60) * 1000;
    assert!(r
        .decode("x", &completed, expiration_ms + 999)
        .unwrap()
        .is_some());
    assert_eq!(
        r.decode("x", &completed, expiration_ms + 1000).unwrap(),
        None
    );
    let running = item(&[
        ("status", s("INPROGRESS")),
        ("expiration", n(now / 1000 + 3600)),
        ("in_progress_expiration", n(now + 5_000)),
    ]);
    assert_eq!(
        r.decode("x", &running, now).unwrap(),
        Some(PowertoolsRecord::InProgress {
            until_ms: now + 5_000
        })
    );
    // Taken over only once `in_progress_expiration < now`.
    assert!(r.decode("x", &running, now + 5_000).unwrap().is_some());
    assert_eq!(r.decode("x", &running, now + 5_001).unwrap(), None);
    let odd = item(&[("status", s("DONE")), ("expiration", n(now / 1000 + 60))]);
    let err = r.decode("x", &odd, now).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CorruptRecord);
    assert!(err.to_string().contains("\"DONE\""), "{err}");
}
