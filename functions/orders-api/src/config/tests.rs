use super::*;

/// `pairs` with the two tables orders-api always needs.
fn with_tables(pairs: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut all = vec![("IDEMPOTENCY_TABLE", "i"), ("ORDERS_TABLE", "o")];
    all.extend_from_slice(pairs);
    all
}

#[test]
fn the_cut_over_is_off_unless_its_table_is_named_and_read_when_it_is() {
    let lookup = idempotency_engine::lookup_in;
    let off = Config::from_lookup(lookup(&with_tables(&[]))).unwrap();
    assert_eq!(off.powertools, None);
    let empty = Config::from_lookup(lookup(&with_tables(&[
        ("IDEMPOTENCY_POWERTOOLS_TABLE", ""),
        ("IDEMPOTENCY_POWERTOOLS_KEY_PREFIX", ""),
        ("IDEMPOTENCY_POWERTOOLS_UNTIL", ""),
    ])))
    .unwrap();
    assert_eq!(
        empty.powertools, None,
        "empty is off: the template parameters' default"
    );
    for (until, epoch_s) in [
        ("2026-12-01T00:00:00Z", 1_796_083_200),
        ("2026-12-01T01:00:00+01:00", 1_796_083_200),
        ("2026-12-01T00:00:00.500Z", 1_796_083_200),
        ("2026-11-30t19:00:00-05:00", 1_796_083_200),
        ("2000-02-29T12:00:00Z", 951_825_600),
        ("1970-01-01T00:00:00Z", 0),
    ] {
        let on = Config::from_lookup(lookup(&with_tables(&[
            ("IDEMPOTENCY_POWERTOOLS_TABLE", "IdempotencyTable"),
            (
                "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX",
                "orders-api.app.lambda_handler",
            ),
            ("IDEMPOTENCY_POWERTOOLS_UNTIL", until),
            ("IDEMPOTENCY_POWERTOOLS_SHARED_KEYS", "true"),
        ])))
        .unwrap();
        let cutover = on.powertools.expect("the cut-over is on").settings;
        assert_eq!(cutover.table, "IdempotencyTable");
        assert_eq!(cutover.key_prefix, "orders-api.app.lambda_handler");
        assert_eq!(
            cutover
                .until
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            epoch_s,
            "{until}"
        );
    }
}

#[test]
fn a_cut_over_that_could_answer_one_tenant_with_another_is_refused() {
    let lookup = idempotency_engine::lookup_in;
    let cutover = [
        ("IDEMPOTENCY_POWERTOOLS_TABLE", "pt-table"),
        (
            "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX",
            "orders-api.app.lambda_handler",
        ),
        ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-12-01T00:00:00Z"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut pairs = cutover.to_vec();
        pairs.extend_from_slice(extra);
        Config::from_lookup(lookup(&with_tables(&pairs)))
    };
    // The tenant is the JWT `sub`: a key of the header alone, or an
    // expression that does not select the claim, is refused, naming both
    // settings.
    for extra in [
        &[][..],
        &[(
            "IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH",
            "headers.\"idempotency-key\"",
        )][..],
        &[(
            "IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH",
            "[requestContext.authorizer.jwt.claims.email, body]",
        )][..],
    ] {
        let err = with(extra).unwrap_err();
        assert!(
            err.contains("IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH")
                && err.contains("IDEMPOTENCY_POWERTOOLS_SHARED_KEYS=true")
                && err.contains("requestContext.authorizer.jwt.claims.sub"),
            "{extra:?}: {err}"
        );
    }
    // The claim selected, or keys declared shared: it starts.
    for extra in [
        &[(
            "IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH",
            "[requestContext.authorizer.jwt.claims.sub, headers.\"idempotency-key\"]",
        )][..],
        &[("IDEMPOTENCY_POWERTOOLS_SHARED_KEYS", "true")][..],
    ] {
        assert!(with(extra).is_ok(), "{extra:?}");
    }
    // An expression that is not JMESPath is refused naming its variable.
    let err = with(&[("IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH", "headers.[")]).unwrap_err();
    assert!(
        err.starts_with("IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH: "),
        "{err}"
    );
}

#[test]
fn each_bad_cut_over_setting_is_refused_in_one_line_naming_its_variable() {
    let table = ("IDEMPOTENCY_POWERTOOLS_TABLE", "pt-table");
    let prefix = (
        "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX",
        "orders-api.app.lambda_handler",
    );
    let until = ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-12-01T00:00:00Z");
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[prefix, until],
            "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX is set but IDEMPOTENCY_POWERTOOLS_TABLE is not",
        ),
        (
            &[until],
            "IDEMPOTENCY_POWERTOOLS_UNTIL is set but IDEMPOTENCY_POWERTOOLS_TABLE is not",
        ),
        (
            &[("IDEMPOTENCY_POWERTOOLS_TABLE", "a b"), prefix, until],
            "IDEMPOTENCY_POWERTOOLS_TABLE=\"a b\" is not a DynamoDB table name",
        ),
        (
            &[table, until],
            "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX is not set but IDEMPOTENCY_POWERTOOLS_TABLE is",
        ),
        (
            &[
                table,
                ("IDEMPOTENCY_POWERTOOLS_KEY_PREFIX", "orders-api.app.h#abc"),
                until,
            ],
            "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX=\"orders-api.app.h#abc\" holds a `#`",
        ),
        (
            &[table, prefix],
            "IDEMPOTENCY_POWERTOOLS_UNTIL is not set but IDEMPOTENCY_POWERTOOLS_TABLE is",
        ),
        (
            &[
                table,
                prefix,
                ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-12-01"),
            ],
            "IDEMPOTENCY_POWERTOOLS_UNTIL=\"2026-12-01\" is not an RFC 3339 time",
        ),
        (
            &[
                table,
                prefix,
                ("IDEMPOTENCY_POWERTOOLS_UNTIL", "1796083200"),
            ],
            "IDEMPOTENCY_POWERTOOLS_UNTIL=\"1796083200\" is not an RFC 3339 time",
        ),
        (
            &[
                table,
                prefix,
                ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-13-01T00:00:00Z"),
            ],
            "IDEMPOTENCY_POWERTOOLS_UNTIL=\"2026-13-01T00:00:00Z\" is not an RFC 3339 time",
        ),
        (
            &[
                table,
                prefix,
                ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-02-29T00:00:00Z"),
            ],
            "IDEMPOTENCY_POWERTOOLS_UNTIL=\"2026-02-29T00:00:00Z\" is not an RFC 3339 time",
        ),
        (
            &[
                table,
                prefix,
                ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-12-01T00:00:00"),
            ],
            "IDEMPOTENCY_POWERTOOLS_UNTIL=\"2026-12-01T00:00:00\" is not an RFC 3339 time",
        ),
        (
            &[
                table,
                prefix,
                ("IDEMPOTENCY_POWERTOOLS_UNTIL", "1969-12-31T23:59:59Z"),
            ],
            "IDEMPOTENCY_POWERTOOLS_UNTIL=\"1969-12-31T23:59:59Z\" is not an RFC 3339 time",
        ),
    ];
    for (pairs, start) in cases {
        let err =
            Config::from_lookup(idempotency_engine::lookup_in(&with_tables(pairs))).unwrap_err();
        assert!(err.starts_with(start), "{pairs:?}: {err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
}

#[test]
fn the_replica_wait_is_read_for_the_store() {
    let config = Config::from_lookup(idempotency_engine::lookup_in(&with_tables(&[
        ("IDEMPOTENCY_STORE_URL", "redis://primary:6379"),
        ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "1"),
        ("IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS", "250"),
    ])))
    .unwrap();
    assert_eq!(
        config.engine.redis_wait,
        Some(idempotency_engine::RedisWait {
            replicas: 1,
            timeout: Duration::from_millis(250)
        })
    );
    let err = Config::from_lookup(idempotency_engine::lookup_in(&with_tables(&[
        ("IDEMPOTENCY_STORE_URL", "redis://primary:6379"),
        ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "-1"),
    ])))
    .unwrap_err();
    assert!(
        err.starts_with("IDEMPOTENCY_REDIS_WAIT_REPLICAS=\"-1\""),
        "{err}"
    );
}

#[test]
fn config_requires_tables_and_numbers() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    };
    let err = Config::from_lookup(env(&[("ORDERS_TABLE", "o")])).unwrap_err();
    assert!(err.contains("IDEMPOTENCY_TABLE"));
    let err = Config::from_lookup(env(&[
        ("IDEMPOTENCY_TABLE", "i"),
        ("ORDERS_TABLE", "o"),
        ("SIMULATED_PROVIDER_LATENCY_MS", "fast"),
    ]))
    .unwrap_err();
    assert!(err.contains("SIMULATED_PROVIDER_LATENCY_MS"));
    let ok = Config::from_lookup(env(&[
        ("IDEMPOTENCY_TABLE", "i"),
        ("ORDERS_TABLE", "o"),
        ("SIMULATED_PROVIDER_LATENCY_MS", "25"),
    ]))
    .unwrap();
    assert_eq!(ok.provider_latency, Duration::from_millis(25));
    assert_eq!(ok.expires_after, Duration::from_secs(86_400));
    assert_eq!(ok.offload, None, "no offload unless a bucket is named");
    assert_eq!(ok.wait_for_result, Duration::ZERO, "no wait unless asked");
    let wait = Config::from_lookup(env(&[
        ("IDEMPOTENCY_TABLE", "i"),
        ("ORDERS_TABLE", "o"),
        ("IDEMPOTENCY_WAIT_FOR_RESULT_MS", "8000"),
    ]))
    .unwrap();
    assert_eq!(wait.wait_for_result, Duration::from_secs(8));
    for bad in ["8s", "-1", "900001"] {
        let err = Config::from_lookup(move |name: &str| match name {
            "IDEMPOTENCY_TABLE" | "ORDERS_TABLE" => Some("t".to_owned()),
            "IDEMPOTENCY_WAIT_FOR_RESULT_MS" => Some(bad.to_owned()),
            _ => None,
        })
        .unwrap_err();
        assert!(
            err.contains("IDEMPOTENCY_WAIT_FOR_RESULT_MS"),
            "{bad}: {err}"
        );
    }
    let with_expiry = |expiry: &'static str| {
        move |name: &str| match name {
            "IDEMPOTENCY_TABLE" => Some("i".to_owned()),
            "ORDERS_TABLE" => Some("o".to_owned()),
            "IDEMPOTENCY_EXPIRES_AFTER_SECONDS" => Some(expiry.to_owned()),
            _ => None,
        }
    };
    // A record that expires as it is written, or in centuries (an
    // expiry past what the arithmetic and TTL hold), is a typo: refused
    // at start, by name.
    for absurd in ["0", "31536001", "18446744073709551615"] {
        let err = Config::from_lookup(with_expiry(absurd)).unwrap_err();
        assert!(
            err.contains("IDEMPOTENCY_EXPIRES_AFTER_SECONDS") && err.contains("31536000"),
            "{absurd}: {err}"
        );
    }
    let year = Config::from_lookup(with_expiry("31536000")).unwrap();
    assert_eq!(year.expires_after, Duration::from_secs(31_536_000));
    let offloaded = Config::from_lookup(env(&[
        ("IDEMPOTENCY_TABLE", "i"),
        ("ORDERS_TABLE", "o"),
        ("IDEMPOTENCY_OFFLOAD_BUCKET", "large-responses"),
    ]))
    .unwrap();
    assert_eq!(
        offloaded.offload,
        Some(Offload {
            bucket: "large-responses".into(),
            prefix: "orders-api/".into()
        })
    );
}
