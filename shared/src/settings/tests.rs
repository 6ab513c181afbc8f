use super::*;

/// A lookup of `pairs` instead of the process environment.
fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        let (_, value) = pairs.iter().find(|(key, _)| *key == name)?;
        Some((*value).to_owned())
    }
}

fn refused(pairs: &[(&str, &str)]) -> String {
    let err = Settings::from_lookup(env(pairs)).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig, "{err}");
    let message = err.to_string();
    assert!(!message.contains('\n'), "one line: {message}");
    message
}

#[test]
fn nothing_set_is_every_default() {
    let settings = Settings::from_lookup(env(&[])).unwrap();
    assert_eq!(
        settings,
        Settings {
            warm_up: true,
            ..Settings::default()
        }
    );
    assert!(settings.store.is_dynamodb());
    let err = settings.table().unwrap_err();
    assert!(
        err.to_string().starts_with("IDEMPOTENCY_TABLE is not set"),
        "{err}"
    );
}

#[test]
fn every_variable_is_read() {
    let settings = Settings::from_lookup(env(&[
        (TABLE_ENV, " idempotency "),
        (DISABLED_ENV, "TRUE"),
        (EXPIRES_AFTER_ENV, "3600"),
        (MAX_LEASE_ENV, " 60 "),
        (WAIT_FOR_RESULT_ENV, "8000"),
        (METRICS_NAMESPACE_ENV, "Orders"),
        (STORE_TIMEOUT_ENV, " 5000 "),
        (WARM_UP_ENV, "0"),
        (ALLOW_ANONYMOUS_ENV, "1"),
        (OFFLOAD_BUCKET_ENV, "large"),
        (OFFLOAD_PREFIX_ENV, "api/"),
        (POWERTOOLS_TABLE_ENV, "pt-table"),
        (POWERTOOLS_KEY_PREFIX_ENV, "fn.app.handler"),
        (POWERTOOLS_UNTIL_ENV, "2026-12-01T01:00:00+01:00"),
        (POWERTOOLS_MAX_TIMEOUT_ENV, "30"),
        (POWERTOOLS_RUNTIME_ENV, " TypeScript "),
        (
            POWERTOOLS_KEY_JMESPATH_ENV,
            "powertools_json(body).order_id",
        ),
        (POWERTOOLS_VALIDATION_JMESPATH_ENV, "body"),
        (POWERTOOLS_SHARED_KEYS_ENV, "true"),
        (STORE_URL_ENV, "redis://primary:6379"),
        (REDIS_WAIT_REPLICAS_ENV, "2"),
        (REDIS_WAIT_TIMEOUT_MS_ENV, "1999"),
    ]))
    .unwrap();
    assert_eq!(settings.table().unwrap(), "idempotency");
    assert!(settings.disabled && settings.allow_anonymous && !settings.warm_up);
    assert_eq!(settings.expires_after, Some(Duration::from_secs(3600)));
    assert_eq!(settings.max_lease, Some(Duration::from_secs(60)));
    assert_eq!(settings.wait_for, Some(Duration::from_secs(8)));
    assert_eq!(settings.store_timeout, Some(Duration::from_secs(5)));
    assert_eq!(settings.metrics_namespace.as_deref(), Some("Orders"));
    assert_eq!(
        settings.offload,
        Some(OffloadSettings {
            bucket: "large".into(),
            prefix: Some("api/".into())
        })
    );
    assert_eq!(
        settings.powertools,
        Some(PowertoolsSettings {
            table: "pt-table".into(),
            key_prefix: "fn.app.handler".into(),
            until: UNIX_EPOCH + Duration::from_secs(1_796_083_200),
            max_timeout: Duration::from_secs(30),
            runtime: "typescript".into(),
            key_jmespath: Some("powertools_json(body).order_id".into()),
            validation_jmespath: Some("body".into()),
            shared_keys: true,
        })
    );
    assert_eq!(settings.store.url.as_deref(), Some("redis://primary:6379"));
    assert_eq!(
        settings.store.redis_wait,
        Some(RedisWait {
            replicas: 2,
            timeout: Duration::from_millis(1999)
        })
    );
    let config = settings.config(crate::MemoryStore::new());
    assert!(config.is_disabled());
    assert_eq!(config.expires_after, Duration::from_secs(3600));
    assert_eq!(config.leases.max_lease, Duration::from_secs(60));
    assert_eq!(config.wait_for, Some(Duration::from_secs(8)));
    assert!(config.metrics.is_some());
}

#[test]
fn empty_is_unset_and_a_wait_of_zero_is_none() {
    let settings = Settings::from_lookup(env(&[
        (TABLE_ENV, ""),
        (EXPIRES_AFTER_ENV, " "),
        (METRICS_NAMESPACE_ENV, " "),
        (WAIT_FOR_RESULT_ENV, "0"),
        (WARM_UP_ENV, ""),
        (POWERTOOLS_TABLE_ENV, ""),
        (POWERTOOLS_KEY_PREFIX_ENV, ""),
        (POWERTOOLS_UNTIL_ENV, ""),
        (STORE_URL_ENV, " "),
        (REDIS_WAIT_REPLICAS_ENV, " "),
    ]))
    .unwrap();
    assert_eq!(
        settings,
        Settings {
            warm_up: true,
            ..Settings::default()
        }
    );
}

/// Each bad value is refused once, here, in one line that starts with the
/// variable and the value: every function and `from_env` reads through
/// this, so the rule is the same for all of them.
#[test]
fn each_bad_value_is_refused_naming_its_variable_and_value() {
    let numbers: &[(&str, &[&str])] = &[
        (
            EXPIRES_AFTER_ENV,
            &["0", "1h", "-1", "31536001", "18446744073709551616"],
        ),
        (MAX_LEASE_ENV, &["0", "-5", "86401", "15m"]),
        (WAIT_FOR_RESULT_ENV, &["5s", "-1", "900001"]),
        (STORE_TIMEOUT_ENV, &["0", "0.5", "900001"]),
        (REDIS_WAIT_TIMEOUT_MS_ENV, &["0", "2000"]),
    ];
    for (name, values) in numbers {
        for value in *values {
            let mut pairs = vec![(*name, *value)];
            if *name == REDIS_WAIT_TIMEOUT_MS_ENV {
                pairs.extend([(STORE_URL_ENV, "redis://h"), (REDIS_WAIT_REPLICAS_ENV, "1")]);
            }
            let message = refused(&pairs);
            assert!(
                message.starts_with(&format!("{name}={value:?} is not a whole number of ")),
                "{message}"
            );
        }
    }
    for name in [
        DISABLED_ENV,
        LEGACY_DISABLED_ENV,
        WARM_UP_ENV,
        ALLOW_ANONYMOUS_ENV,
    ] {
        for value in ["yes", "off", "2", "enabled"] {
            assert_eq!(
                refused(&[(name, value)]),
                format!("{name}={value:?} is not a boolean: use true or false")
            );
        }
    }
    for name in [REDIS_CLUSTER_ENV, CREATE_SCHEMA_ENV] {
        let message = refused(&[(STORE_URL_ENV, "redis://h"), (name, "yes")]);
        assert!(
            message.starts_with(&format!("{name}=\"yes\" is not a boolean")),
            "{message}"
        );
    }
    for (value, replicas) in [("0", "0"), ("one", "one"), ("4294967296", "4294967296")] {
        let message = refused(&[
            (STORE_URL_ENV, "redis://h"),
            (REDIS_WAIT_REPLICAS_ENV, value),
        ]);
        assert!(
            message.starts_with(&format!(
                "{REDIS_WAIT_REPLICAS_ENV}={replicas:?} is not a whole number of replicas of at least 1"
            )),
            "{message}"
        );
    }
}

#[test]
fn the_off_switch_reads_its_former_name_when_the_new_one_is_unset() {
    let on = |pairs: &[(&str, &str)]| Settings::from_lookup(env(pairs)).unwrap().disabled;
    assert!(on(&[(DISABLED_ENV, "true")]));
    assert!(on(&[(LEGACY_DISABLED_ENV, "1")]));
    assert!(!on(&[(LEGACY_DISABLED_ENV, "false")]));
    assert!(
        !on(&[(DISABLED_ENV, "false"), (LEGACY_DISABLED_ENV, "true")]),
        "the new name wins"
    );
    assert!(!on(&[]));
}

#[test]
fn the_cut_over_needs_its_three_variables_and_each_is_checked() {
    let table = (POWERTOOLS_TABLE_ENV, "pt-table");
    let prefix = (POWERTOOLS_KEY_PREFIX_ENV, "orders-api.app.lambda_handler");
    let until = (POWERTOOLS_UNTIL_ENV, "2026-12-01T00:00:00Z");
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[prefix],
            "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX is set but IDEMPOTENCY_POWERTOOLS_TABLE is not",
        ),
        (
            &[until],
            "IDEMPOTENCY_POWERTOOLS_UNTIL is set but IDEMPOTENCY_POWERTOOLS_TABLE is not",
        ),
        (
            &[(POWERTOOLS_TABLE_ENV, "ab"), prefix, until],
            "IDEMPOTENCY_POWERTOOLS_TABLE=\"ab\" is not a DynamoDB table name",
        ),
        (
            &[table, until],
            "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX is not set but IDEMPOTENCY_POWERTOOLS_TABLE is",
        ),
        (
            &[table, (POWERTOOLS_KEY_PREFIX_ENV, "a#b"), until],
            "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX=\"a#b\" holds a `#`",
        ),
        (
            &[table, prefix],
            "IDEMPOTENCY_POWERTOOLS_UNTIL is not set but IDEMPOTENCY_POWERTOOLS_TABLE is",
        ),
        (
            &[
                table,
                prefix,
                (POWERTOOLS_UNTIL_ENV, "1969-12-31T23:59:59Z"),
            ],
            "IDEMPOTENCY_POWERTOOLS_UNTIL=\"1969-12-31T23:59:59Z\" is not an RFC 3339 time",
        ),
        (
            &[(POWERTOOLS_KEY_JMESPATH_ENV, "body")],
            "IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH is set but IDEMPOTENCY_POWERTOOLS_TABLE is not",
        ),
        (
            &[(POWERTOOLS_SHARED_KEYS_ENV, "true")],
            "IDEMPOTENCY_POWERTOOLS_SHARED_KEYS is set but IDEMPOTENCY_POWERTOOLS_TABLE is not",
        ),
        (
            &[table, prefix, until, (POWERTOOLS_RUNTIME_ENV, "java")],
            "IDEMPOTENCY_POWERTOOLS_RUNTIME=\"java\" is not a Powertools runtime",
        ),
        (
            &[table, prefix, until, (POWERTOOLS_MAX_TIMEOUT_ENV, "901")],
            "IDEMPOTENCY_POWERTOOLS_MAX_TIMEOUT_SECONDS=\"901\"",
        ),
        (
            &[table, prefix, until, (POWERTOOLS_SHARED_KEYS_ENV, "yes")],
            "IDEMPOTENCY_POWERTOOLS_SHARED_KEYS=\"yes\" is not a boolean",
        ),
    ];
    for (pairs, start) in cases {
        let message = refused(pairs);
        assert!(message.starts_with(start), "{pairs:?}: {message}");
    }
}

#[test]
fn engine_companions_need_the_url_and_the_replica_wait_needs_one_redis_server() {
    for name in [
        SECRET_ARN_ENV,
        CREATE_SCHEMA_ENV,
        REDIS_CLUSTER_ENV,
        REDIS_WAIT_REPLICAS_ENV,
    ] {
        let value = if name == SECRET_ARN_ENV {
            "arn:aws:secretsmanager:x"
        } else {
            "1"
        };
        let message = refused(&[(name, value)]);
        assert!(
            message.starts_with(&format!("{name} is set but IDEMPOTENCY_STORE_URL is not")),
            "{message}"
        );
    }
    let message = refused(&[
        (STORE_URL_ENV, "postgres://db/x"),
        (REDIS_WAIT_REPLICAS_ENV, "1"),
    ]);
    assert!(message.contains("does not name Redis"), "{message}");
    let message = refused(&[
        (STORE_URL_ENV, "rediss://cache:6379"),
        (REDIS_CLUSTER_ENV, "true"),
        (REDIS_WAIT_REPLICAS_ENV, "1"),
    ]);
    assert!(
        message
            .starts_with("IDEMPOTENCY_REDIS_WAIT_REPLICAS is set with IDEMPOTENCY_REDIS_CLUSTER"),
        "{message}"
    );
    let message = refused(&[
        (STORE_URL_ENV, "redis://h"),
        (REDIS_WAIT_TIMEOUT_MS_ENV, "300"),
    ]);
    assert!(
        message.starts_with(
            "IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS is set but IDEMPOTENCY_REDIS_WAIT_REPLICAS is not"
        ),
        "{message}"
    );
    let default_timeout = Settings::from_lookup(env(&[
        (STORE_URL_ENV, "redis://h"),
        (REDIS_WAIT_REPLICAS_ENV, "1"),
    ]))
    .unwrap();
    assert_eq!(
        default_timeout.store.redis_wait.map(|w| w.timeout),
        Some(Duration::from_millis(DEFAULT_REDIS_WAIT_TIMEOUT_MS))
    );
}

#[test]
fn every_variable_has_a_constant_an_entry_and_the_prefix() {
    let mut names: Vec<_> = VARIABLES.iter().map(|v| v.name).collect();
    assert!(
        names.iter().all(|n| n.starts_with("IDEMPOTENCY_")),
        "{names:?}"
    );
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), VARIABLES.len(), "a variable listed twice");
    // Each row of the generated table names one variable.
    assert_eq!(markdown_table().lines().count(), VARIABLES.len() + 2);
}
