//! The alarms and the dashboard of template.yaml and deploy/*.yaml watch
//! metrics that exist: the real function processes (`orders-api`,
//! `order-events`, `sweeper`, configured as the template configures them)
//! run first executions, replays, conflicts, mismatches, a store that cannot
//! be reached and a sweep of a stuck record, and every metric an alarm or a
//! widget names in the functions' namespace must appear in an EMF line they
//! printed, with the same dimensions (names and values) and unit. Metrics of
//! AWS's own namespaces must be ones those services publish, with their
//! dimension pointing at a resource of the right type in the same template.
//! Every function runs with the stack's name as the template gives it
//! (`IDEMPOTENCY_METRICS_STACK: !Ref AWS::StackName`), and an alarm or a
//! widget must name that `Stack` dimension too: one that does not would
//! watch every deployment in the account and Region, and is refused.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use integration_tests::functions;
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use serde_json::{json, Value};
use serde_yaml_ng::Value as Yaml;

/// One metric an alarm or a dashboard widget watches.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Watched {
    /// `<template> <resource>`, for the failure message.
    place: String,
    namespace: String,
    metric: String,
    /// Sorted by name. A value is a literal, or `!Ref X` / `!GetAtt X.Y`.
    dimensions: Vec<(String, String)>,
    unit: Option<String>,
}

/// One metric of one EMF line a function printed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Printed {
    namespace: String,
    metric: String,
    /// Sorted by name.
    dimensions: Vec<(String, String)>,
    unit: String,
}

/// The namespace the functions print their metrics in: what the template
/// sets for `IDEMPOTENCY_METRICS_NAMESPACE` (the sweeper's is fixed).
const NAMESPACE: &str = "LambdaIdempotency";

/// The stack name the functions run with here: what `!Ref AWS::StackName`
/// is in an alarm's or a widget's dimension.
const STACK: &str = "alarms-test-stack";

/// The variable through which the templates give the functions their
/// stack's name.
const STACK_ENV: &str = lambda_idempotency::metrics::STACK_ENV;

/// Metrics AWS services publish themselves, each with the dimension it is
/// published under and the resource type that dimension must name.
const AWS_METRICS: &[(&str, &[&str], &str, &str)] = &[
    (
        "AWS/Lambda",
        &[
            "Errors",
            "Throttles",
            "Duration",
            "Invocations",
            "ConcurrentExecutions",
        ],
        "FunctionName",
        "AWS::Serverless::Function",
    ),
    (
        "AWS/SQS",
        &[
            "ApproximateNumberOfMessagesVisible",
            "ApproximateAgeOfOldestMessage",
            "NumberOfMessagesReceived",
            "NumberOfMessagesSent",
        ],
        "QueueName",
        "AWS::SQS::Queue",
    ),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

const TEMPLATES: [&str; 3] = [
    "template.yaml",
    "deploy/valkey.yaml",
    "deploy/postgres.yaml",
];

fn load(template: &str) -> Yaml {
    let path = root().join(template);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {template}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("parse {template}: {e}"))
}

/// A dimension value as written: a literal, `!Ref X` or `!GetAtt X.Y`.
fn dimension_value(value: &Yaml) -> Result<String, String> {
    match value {
        Yaml::String(s) => Ok(s.clone()),
        Yaml::Tagged(tagged) => match (tagged.tag.to_string().as_str(), &tagged.value) {
            ("!Ref", Yaml::String(name)) => Ok(format!("!Ref {name}")),
            ("!GetAtt", Yaml::String(att)) => Ok(format!("!GetAtt {att}")),
            (tag, _) => Err(format!("a dimension value {tag} this check cannot read")),
        },
        other => Err(format!(
            "a dimension value {other:?} this check cannot read"
        )),
    }
}

/// `${X}` / `${X.Y}` of a dashboard body, as the same references.
fn sub_reference(value: &str) -> String {
    match value
        .strip_prefix("${")
        .and_then(|rest| rest.strip_suffix('}'))
    {
        Some(inner) if inner.contains('.') => format!("!GetAtt {inner}"),
        Some(inner) => format!("!Ref {inner}"),
        None => value.to_owned(),
    }
}

fn text(value: Option<&Yaml>) -> Option<String> {
    value.and_then(|v| v.as_str()).map(str::to_owned)
}

/// A metric of an alarm: `Namespace`, `MetricName`, `Dimensions` (and
/// `Unit`) in `metric`, the unit in `unit_from` (a `MetricStat` keeps it
/// beside the metric).
fn alarm_metric(
    place: &str,
    metric: &Yaml,
    unit_from: &Yaml,
    errors: &mut Vec<String>,
) -> Option<Watched> {
    let (Some(namespace), Some(name)) = (
        text(metric.get("Namespace")),
        text(metric.get("MetricName")),
    ) else {
        errors.push(format!(
            "{place}: a metric without a literal Namespace and MetricName"
        ));
        return None;
    };
    let mut dimensions = Vec::new();
    for d in metric
        .get("Dimensions")
        .and_then(|d| d.as_sequence())
        .into_iter()
        .flatten()
    {
        let Some(dim) = text(d.get("Name")) else {
            errors.push(format!("{place}: a dimension without a Name"));
            return None;
        };
        match d.get("Value").map(dimension_value) {
            Some(Ok(value)) => dimensions.push((dim, value)),
            Some(Err(e)) => {
                errors.push(format!("{place}: {e}"));
                return None;
            }
            None => {
                errors.push(format!("{place}: dimension {dim} has no Value"));
                return None;
            }
        }
    }
    dimensions.sort();
    Some(Watched {
        place: place.to_owned(),
        namespace,
        metric: name,
        dimensions,
        unit: text(unit_from.get("Unit")),
    })
}

/// Every metric the alarms and dashboards of `template` watch, the types of
/// its resources, and what could not be read.
fn watched(template: &str) -> (Vec<Watched>, BTreeMap<String, String>, Vec<String>) {
    let doc = load(template);
    let resources = doc
        .get("Resources")
        .and_then(|r| r.as_mapping())
        .unwrap_or_else(|| panic!("{template} has no Resources"));
    let mut types = BTreeMap::new();
    let mut found = Vec::new();
    let mut errors = Vec::new();
    // The alarms' names, and the alarm ARNs the dashboard shows.
    let mut names = Vec::new();
    let mut shown = Vec::new();
    for (id, resource) in resources {
        let id = id.as_str().unwrap_or_default().to_owned();
        let kind = text(resource.get("Type")).unwrap_or_default();
        types.insert(id.clone(), kind.clone());
        let place = format!("{template} {id}");
        let properties = resource.get("Properties").cloned().unwrap_or(Yaml::Null);
        match kind.as_str() {
            "AWS::CloudWatch::Alarm" => {
                match properties.get("AlarmName") {
                    Some(Yaml::Tagged(tagged)) if tagged.tag == "!Sub" => {
                        names.push(text(Some(&tagged.value)).unwrap_or_default())
                    }
                    _ => errors.push(format!("{place}: no AlarmName !Sub \"${{AWS::StackName}}-...\" (the dashboard names alarms by it)")),
                }
                if properties.get("MetricName").is_some() {
                    found.extend(alarm_metric(&place, &properties, &properties, &mut errors));
                }
                let queries = properties.get("Metrics").and_then(|m| m.as_sequence());
                let ids: Vec<String> = queries
                    .into_iter()
                    .flatten()
                    .filter_map(|q| text(q.get("Id")))
                    .collect();
                for query in queries.into_iter().flatten() {
                    if let Some(stat) = query.get("MetricStat") {
                        match stat.get("Metric") {
                            Some(metric) => {
                                found.extend(alarm_metric(&place, metric, stat, &mut errors))
                            }
                            None => errors.push(format!("{place}: a MetricStat without Metric")),
                        }
                    } else if let Some(expression) = text(query.get("Expression")) {
                        // Every lower-case word of the expression that is
                        // not a function must be a query of this alarm.
                        for word in expression
                            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                            .filter(|w| w.starts_with(|c: char| c.is_ascii_lowercase()))
                        {
                            if !ids.iter().any(|id| id == word) {
                                errors.push(format!(
                                    "{place}: expression {expression:?} names {word:?}, which is no query of this alarm"
                                ));
                            }
                        }
                    } else {
                        errors.push(format!(
                            "{place}: a query with neither MetricStat nor Expression"
                        ));
                    }
                }
                // An alarm nobody hears is no alarm: each notifies the
                // topic the stack is given, going in and out of ALARM.
                for actions in ["AlarmActions", "OKActions"] {
                    let notifies = match properties.get(actions) {
                        Some(Yaml::Tagged(tagged)) if tagged.tag == "!If" => {
                            tagged.value.get(1).and_then(|then| then.get(0)).map(|topic| {
                                matches!(topic, Yaml::Tagged(t) if t.tag == "!Ref" && t.value.as_str() == Some("AlarmTopicArn"))
                            })
                        }
                        _ => None,
                    };
                    if notifies != Some(true) {
                        errors.push(format!("{place}: {actions} is not [!Ref AlarmTopicArn] when the stack has a topic"));
                    }
                }
                if properties.get("MetricName").is_none() && queries.is_none() {
                    errors.push(format!("{place}: an alarm without a metric"));
                }
            }
            "AWS::CloudWatch::Dashboard" => {
                let body = match properties.get("DashboardBody") {
                    Some(Yaml::Tagged(tagged)) if tagged.tag == "!Sub" => text(Some(&tagged.value)),
                    other => text(other),
                };
                let Some(body) = body else {
                    errors.push(format!(
                        "{place}: DashboardBody is neither a string nor a !Sub string"
                    ));
                    continue;
                };
                let body: Value = match serde_json::from_str(&body) {
                    Ok(body) => body,
                    Err(e) => {
                        errors.push(format!("{place}: DashboardBody is not JSON: {e}"));
                        continue;
                    }
                };
                for (n, widget) in body["widgets"].as_array().into_iter().flatten().enumerate() {
                    let place = format!("{place} widget {n} ({})", widget["properties"]["title"]);
                    for alarm in widget["properties"]["alarms"]
                        .as_array()
                        .into_iter()
                        .flatten()
                    {
                        shown.push(alarm.as_str().unwrap_or_default().to_owned());
                    }
                    for row in widget["properties"]["metrics"]
                        .as_array()
                        .into_iter()
                        .flatten()
                    {
                        match dashboard_metric(&place, row) {
                            Ok(w) => found.push(w),
                            Err(e) => errors.push(e),
                        }
                    }
                }
            }
            _ => {}
        }
    }
    // The dashboard shows every alarm, by the ARN its name gives it.
    let arns: Vec<String> = names
        .iter()
        .map(|name| format!("arn:${{AWS::Partition}}:cloudwatch:${{AWS::Region}}:${{AWS::AccountId}}:alarm:{name}"))
        .collect();
    for arn in &shown {
        if !arns.contains(arn) {
            errors.push(format!(
                "{template}: the dashboard shows {arn}, no alarm of the template"
            ));
        }
    }
    for arn in &arns {
        if !shown.contains(arn) {
            errors.push(format!("{template}: the dashboard does not show {arn}"));
        }
    }
    (found, types, errors)
}

/// A dashboard row `[namespace, metric, dim, value, ..., {options}]`.
fn dashboard_metric(place: &str, row: &Value) -> Result<Watched, String> {
    let cells = row
        .as_array()
        .ok_or_else(|| format!("{place}: a metric row that is not an array: {row}"))?;
    let strings: Vec<&str> = cells.iter().filter_map(|c| c.as_str()).collect();
    let options = cells.iter().find(|c| c.is_object());
    if strings.iter().any(|s| *s == "..." || *s == ".")
        || options.is_some_and(|o| o.get("expression").is_some())
    {
        return Err(format!(
            "{place}: row {row} uses a shorthand or an expression this check cannot follow: write every metric in full"
        ));
    }
    if strings.len() < 2
        || !strings.len().is_multiple_of(2)
        || strings.len() + usize::from(options.is_some()) != cells.len()
    {
        return Err(format!(
            "{place}: row {row} is not [namespace, metric, name, value, ..., options?]"
        ));
    }
    let mut dimensions: Vec<(String, String)> = strings[2..]
        .chunks(2)
        .map(|pair| (pair[0].to_owned(), sub_reference(pair[1])))
        .collect();
    dimensions.sort();
    Ok(Watched {
        place: place.to_owned(),
        namespace: strings[0].to_owned(),
        metric: strings[1].to_owned(),
        dimensions,
        unit: None,
    })
}

/// The metrics of one printed line (nothing for a line that is not EMF).
fn printed(line: &str) -> Vec<Printed> {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for directive in v["_aws"]["CloudWatchMetrics"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let namespace = directive["Namespace"].as_str().unwrap_or_default();
        for set in directive["Dimensions"].as_array().into_iter().flatten() {
            let mut dimensions: Vec<(String, String)> = set
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|name| name.as_str())
                .map(|name| {
                    (
                        name.to_owned(),
                        v[name].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
            dimensions.sort();
            for metric in directive["Metrics"].as_array().into_iter().flatten() {
                out.push(Printed {
                    namespace: namespace.to_owned(),
                    metric: metric["Name"].as_str().unwrap_or_default().to_owned(),
                    dimensions: dimensions.clone(),
                    unit: metric["Unit"].as_str().unwrap_or("None").to_owned(),
                });
            }
        }
    }
    out
}

/// What is wrong with `w`: nothing, or why no function prints it or AWS
/// does not publish it.
fn check(w: &Watched, printed: &[Printed], types: &BTreeMap<String, String>) -> Option<String> {
    if w.namespace == NAMESPACE {
        // The stack's name, as the stack resolves it.
        let dimensions: Vec<(String, String)> = w
            .dimensions
            .iter()
            .map(|(name, value)| match value.as_str() {
                "!Ref AWS::StackName" => (name.clone(), STACK.to_owned()),
                _ => (name.clone(), value.clone()),
            })
            .collect();
        let hit = printed.iter().any(|p| {
            p.namespace == w.namespace
                && p.metric == w.metric
                && p.dimensions == dimensions
                && w.unit.as_ref().is_none_or(|u| *u == p.unit)
        });
        if hit {
            return None;
        }
        let near: Vec<String> = printed
            .iter()
            .filter(|p| p.metric == w.metric)
            .map(|p| format!("{:?} unit {}", p.dimensions, p.unit))
            .collect();
        return Some(format!(
            "{}: {}/{} with dimensions {:?} unit {:?}: no function printed it (printed with this name: {near:?})",
            w.place, w.namespace, w.metric, w.dimensions, w.unit
        ));
    }
    let Some((_, metrics, dimension, kind)) =
        AWS_METRICS.iter().find(|(ns, ..)| *ns == w.namespace)
    else {
        return Some(format!(
            "{}: namespace {} is neither the functions' ({NAMESPACE}) nor one this check knows AWS publishes",
            w.place, w.namespace
        ));
    };
    if !metrics.contains(&w.metric.as_str()) {
        return Some(format!(
            "{}: {} publishes no metric {}",
            w.place, w.namespace, w.metric
        ));
    }
    let [(name, value)] = w.dimensions.as_slice() else {
        return Some(format!(
            "{}: {}/{} is published with the one dimension {dimension}, not {:?}",
            w.place, w.namespace, w.metric, w.dimensions
        ));
    };
    // A function is named by its Ref; a queue by its QueueName (its Ref is
    // its URL).
    let target = match *dimension {
        "QueueName" => value
            .strip_prefix("!GetAtt ")
            .and_then(|a| a.strip_suffix(".QueueName")),
        _ => value.strip_prefix("!Ref "),
    };
    match target.and_then(|t| types.get(t)) {
        Some(t) if name == dimension && t == kind => None,
        _ => Some(format!(
            "{}: {}/{} dimension {name}={value} does not name a {kind} of this template",
            w.place, w.namespace, w.metric
        )),
    }
}

/// The value the template gives `variable` in `function`'s environment.
fn template_env(function: &str, variable: &str) -> String {
    let doc = load("template.yaml");
    text(
        doc.get("Resources")
            .and_then(|r| r.get(function))
            .and_then(|f| f.get("Properties"))
            .and_then(|p| p.get("Environment"))
            .and_then(|e| e.get("Variables"))
            .and_then(|v| v.get(variable)),
    )
    .unwrap_or_else(|| panic!("template.yaml sets no literal {variable} for {function}"))
}

/// The value `template` gives `variable` in `function`'s environment: a
/// literal, or `!Ref X` / `!GetAtt X.Y` as [`dimension_value`] writes them.
fn template_env_of(template: &str, function: &str, variable: &str) -> Option<String> {
    let doc = load(template);
    let value = doc
        .get("Resources")?
        .get(function)?
        .get("Properties")?
        .get("Environment")?
        .get("Variables")?
        .get(variable)?
        .clone();
    dimension_value(&value).ok()
}

/// `function`'s stack variable as every template sets it (the stack's own
/// name), with the value the functions run with here.
fn stack_env(function: &str) -> (&'static str, &'static str) {
    for template in TEMPLATES {
        assert_eq!(
            template_env_of(template, function, STACK_ENV).as_deref(),
            Some("!Ref AWS::StackName"),
            "{template}: {function} must set {STACK_ENV} to its stack's name, so its metrics \
             are told from another deployment's"
        );
    }
    (STACK_ENV, STACK)
}

/// Start `bin` with `env`, collecting the lines it prints.
fn start(
    bin: &str,
    env: &[(String, String)],
) -> (tokio::process::Child, tokio::task::JoinHandle<Vec<String>>) {
    use tokio::io::AsyncBufReadExt;
    let mut child = functions::spawn(bin, env).expect("spawn the function");
    let stdout = child.stdout.take().expect("stdout is piped");
    let lines = tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut out = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            out.push(line);
        }
        out
    });
    (child, lines)
}

/// Stop the processes and return everything they printed.
async fn stop(
    processes: Vec<(tokio::process::Child, tokio::task::JoinHandle<Vec<String>>)>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (mut child, lines) in processes {
        child.kill().await.expect("kill the function");
        out.extend(lines.await.expect("read its output"));
    }
    out
}

fn response(outcome: Outcome) -> Value {
    match outcome {
        Outcome::Response(body) => serde_json::from_slice(&body).expect("a JSON answer"),
        other => panic!("the function did not answer: {other:?}"),
    }
}

/// No DynamoDB here: connections to it are refused.
const NO_STORE: &str = "http://127.0.0.1:1";

/// `orders-api` as the template configures its metrics: a first
/// execution, a concurrent duplicate, a replay, a mismatch, and a process
/// whose store cannot be reached.
async fn orders_api_lines() -> Vec<String> {
    let bin = crate::process::function_bin("orders-api");
    let bin = bin.to_str().expect("a UTF-8 path");
    let namespace = template_env("OrdersApiFunction", "IDEMPOTENCY_METRICS_NAMESPACE");
    let tables = functions::tables().await.unwrap();
    let api = RuntimeApi::start().await.unwrap();
    let env = functions::orders_env(
        &api,
        &tables,
        &[
            ("IDEMPOTENCY_METRICS_NAMESPACE", namespace.as_str()),
            stack_env("OrdersApiFunction"),
            // Long enough for the duplicate to find the first in progress.
            ("SIMULATED_PROVIDER_LATENCY_MS", "1500"),
        ],
    );
    let processes = vec![start(bin, &env), start(bin, &env)];
    let body = r#"{"customer_id":"cus_1","amount":700,"currency":"EUR"}"#;
    let post = functions::post_order_event("alarm-1", body);
    let timeout = Duration::from_secs(30);
    let (a, b) = tokio::join!(api.invoke(post.clone(), timeout), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        api.invoke(post.clone(), timeout).await
    });
    let mut statuses = [
        response(a)["statusCode"].clone(),
        response(b)["statusCode"].clone(),
    ];
    statuses.sort_by_key(|s| s.as_u64());
    assert_eq!(
        statuses,
        [json!(201), json!(409)],
        "the duplicate finds the first in progress"
    );
    assert_eq!(response(api.invoke(post, timeout).await)["statusCode"], 201);
    let other = functions::post_order_event(
        "alarm-1",
        r#"{"customer_id":"cus_2","amount":1,"currency":"EUR"}"#,
    );
    assert_eq!(
        response(api.invoke(other, timeout).await)["statusCode"],
        422
    );

    let broken_api = RuntimeApi::start().await.unwrap();
    let mut broken = functions::orders_env(
        &broken_api,
        &tables,
        &[
            ("IDEMPOTENCY_METRICS_NAMESPACE", namespace.as_str()),
            stack_env("OrdersApiFunction"),
        ],
    );
    broken.push(("AWS_ENDPOINT_URL_DYNAMODB".into(), NO_STORE.into()));
    let broken_process = start(bin, &broken);
    let refused = functions::post_order_event("alarm-2", body);
    assert_eq!(
        response(broken_api.invoke(refused, timeout).await)["statusCode"],
        503
    );

    let mut processes = processes;
    processes.push(broken_process);
    stop(processes).await
}

/// `order-events` as the template configures its metrics: an SQS batch
/// with a duplicate, a mismatching event, and a process whose store cannot
/// be reached.
async fn order_events_lines() -> Vec<String> {
    let bin = crate::process::function_bin("order-events");
    let bin = bin.to_str().expect("a UTF-8 path");
    let namespace = template_env("OrderEventsFunction", "IDEMPOTENCY_METRICS_NAMESPACE");
    let tables = functions::tables().await.unwrap();
    let env_for = |api: &RuntimeApi| {
        let mut env = api.function_env("order-events");
        for (k, v) in [
            ("IDEMPOTENCY_TABLE", tables.0.as_str()),
            ("ORDERS_TABLE", tables.1.as_str()),
            ("IDEMPOTENCY_METRICS_NAMESPACE", namespace.as_str()),
            stack_env("OrderEventsFunction"),
            ("RUST_LOG", "error"),
        ] {
            env.push((k.into(), v.into()));
        }
        env
    };
    let timeout = Duration::from_secs(30);
    let api = RuntimeApi::start().await.unwrap();
    let process = start(bin, &env_for(&api));
    let batch = std::fs::read_to_string(root().join("events/sqs-order-events-batch.json")).unwrap();
    assert_eq!(
        response(api.invoke(batch, timeout).await),
        json!({"batchItemFailures": []})
    );
    let mismatch = json!({"event_id": "evt-1001", "type": "OrderPlaced", "order_id": "ord-other", "customer_id": "cus_42"});
    assert!(
        matches!(
            api.invoke(mismatch.to_string(), timeout).await,
            Outcome::Error(_)
        ),
        "a mismatching event fails"
    );

    let broken_api = RuntimeApi::start().await.unwrap();
    let mut broken = env_for(&broken_api);
    broken.push(("AWS_ENDPOINT_URL_DYNAMODB".into(), NO_STORE.into()));
    let broken_process = start(bin, &broken);
    let event = json!({"event_id": "evt-2001", "type": "OrderPlaced", "order_id": "ord-9", "customer_id": "cus_1"});
    assert!(
        matches!(
            broken_api.invoke(event.to_string(), timeout).await,
            Outcome::Error(_)
        ),
        "an event whose store cannot be reached fails"
    );
    stop(vec![process, broken_process]).await
}

/// The sweeper sweeping one stuck record, as scheduled.
async fn sweeper_lines() -> Vec<String> {
    let bin = crate::process::function_bin("sweeper");
    let bin = bin.to_str().expect("a UTF-8 path");
    let (api, mut env) = crate::process::sweeper_of_one_stuck_record('6').await;
    let (name, value) = stack_env("SweeperFunction");
    env.push((name.to_owned(), value.to_owned()));
    let process = start(bin, &env);
    let event = std::fs::read_to_string(root().join("events/scheduled-sweep.json")).unwrap();
    let summary = response(api.invoke(event, Duration::from_secs(30)).await);
    assert_eq!(summary["found"], 1, "{summary}");
    stop(vec![process]).await
}

#[tokio::test]
async fn every_alarm_and_widget_watches_a_metric_the_functions_print() {
    let (orders, events, sweeper) =
        tokio::join!(orders_api_lines(), order_events_lines(), sweeper_lines());
    let printed: Vec<Printed> = orders
        .iter()
        .chain(&events)
        .chain(&sweeper)
        .flat_map(|line| printed(line))
        .collect();
    for (metric, service) in [
        ("StoreError", "orders-api"),
        ("StoreError", "order-events"),
        ("InProgressConflict", "orders-api"),
    ] {
        assert!(
            printed.iter().any(|p| p.metric == metric
                && p.dimensions
                    == [
                        ("Service".to_owned(), service.to_owned()),
                        ("Stack".to_owned(), STACK.to_owned())
                    ]),
            "{service} printed no {metric}: {orders:?} {events:?}"
        );
    }
    assert!(
        printed.iter().any(|p| p.metric == "SweepReleased"
            && p.dimensions
                == [
                    ("Function".to_owned(), "sweeper".to_owned()),
                    ("Stack".to_owned(), STACK.to_owned())
                ]),
        "the sweeper printed no SweepReleased of its stack: {sweeper:?}"
    );
    let mut problems = Vec::new();
    for template in TEMPLATES {
        let (watched, types, errors) = watched(template);
        problems.extend(errors);
        let alarms = types
            .values()
            .filter(|t| *t == "AWS::CloudWatch::Alarm")
            .count();
        let dashboards = types
            .values()
            .filter(|t| *t == "AWS::CloudWatch::Dashboard")
            .count();
        assert!(
            alarms >= 1 && dashboards >= 1,
            "{template}: {alarms} alarms, {dashboards} dashboards"
        );
        assert!(
            watched.iter().any(|w| w.namespace == NAMESPACE),
            "{template} watches none of the functions' metrics"
        );
        problems.extend(watched.iter().filter_map(|w| check(w, &printed, &types)));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn watched_emf(metric: &str, dimension: (&str, &str), unit: Option<&str>) -> Watched {
    Watched {
        place: "t".into(),
        namespace: NAMESPACE.into(),
        metric: metric.into(),
        dimensions: vec![(dimension.0.into(), dimension.1.into())],
        unit: unit.map(str::to_owned),
    }
}

#[test]
fn a_watched_metric_must_match_a_printed_line_in_name_dimensions_and_unit() {
    let line = lambda_idempotency::metrics::emf_line(
        NAMESPACE,
        &[("Function", "sweeper")],
        &[("SweepFound", 1)],
        0,
    );
    let printed = printed(&line);
    let types = BTreeMap::new();
    assert_eq!(
        check(
            &watched_emf("SweepFound", ("Function", "sweeper"), Some("Count")),
            &printed,
            &types
        ),
        None
    );
    assert_eq!(
        check(
            &watched_emf("SweepFound", ("Function", "sweeper"), None),
            &printed,
            &types
        ),
        None
    );
    for wrong in [
        watched_emf("SweepFund", ("Function", "sweeper"), Some("Count")),
        watched_emf("SweepFound", ("Service", "sweeper"), Some("Count")),
        watched_emf("SweepFound", ("Function", "orders-api"), Some("Count")),
        watched_emf("SweepFound", ("Function", "sweeper"), Some("Seconds")),
    ] {
        assert!(
            check(&wrong, &printed, &types).is_some(),
            "{wrong:?} passed"
        );
    }
}

#[test]
fn a_watched_metric_of_the_functions_must_name_the_stack_its_lines_carry() {
    let line = lambda_idempotency::metrics::emf_line(
        NAMESPACE,
        &[("Function", "sweeper"), ("Stack", STACK)],
        &[("SweepReleased", 1)],
        0,
    );
    let printed = printed(&line);
    let types = BTreeMap::new();
    let watched = |dimensions: &[(&str, &str)]| Watched {
        place: "t".into(),
        namespace: NAMESPACE.into(),
        metric: "SweepReleased".into(),
        dimensions: dimensions
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        unit: Some("Count".into()),
    };
    assert_eq!(
        check(
            &watched(&[("Function", "sweeper"), ("Stack", "!Ref AWS::StackName")]),
            &printed,
            &types
        ),
        None
    );
    for wrong in [
        // Every deployment's sweeper: refused.
        watched(&[("Function", "sweeper")]),
        // Another stack's.
        watched(&[("Function", "sweeper"), ("Stack", "production")]),
    ] {
        assert!(
            check(&wrong, &printed, &types).is_some(),
            "{wrong:?} passed"
        );
    }
}

#[test]
fn an_aws_metric_must_be_published_and_name_a_resource_of_the_template() {
    let types = BTreeMap::from([
        ("Api".to_owned(), "AWS::Serverless::Function".to_owned()),
        ("Dlq".to_owned(), "AWS::SQS::Queue".to_owned()),
    ]);
    let aws = |ns: &str, metric: &str, dim: &str, value: &str| Watched {
        place: "t".into(),
        namespace: ns.into(),
        metric: metric.into(),
        dimensions: vec![(dim.into(), value.into())],
        unit: None,
    };
    assert_eq!(
        check(
            &aws("AWS/Lambda", "Errors", "FunctionName", "!Ref Api"),
            &[],
            &types
        ),
        None
    );
    assert_eq!(
        check(
            &aws(
                "AWS/SQS",
                "ApproximateNumberOfMessagesVisible",
                "QueueName",
                "!GetAtt Dlq.QueueName"
            ),
            &[],
            &types
        ),
        None
    );
    for wrong in [
        aws("AWS/Lambda", "Error", "FunctionName", "!Ref Api"),
        aws("AWS/Lambda", "Errors", "FunctionName", "!Ref Dlq"),
        aws("AWS/Lambda", "Errors", "FunctionName", "orders-api"),
        aws(
            "AWS/SQS",
            "ApproximateNumberOfMessagesVisible",
            "QueueName",
            "!GetAtt Dlq.Arn",
        ),
        aws(
            "AWS/SQS",
            "ApproximateNumberOfMessagesVisible",
            "QueueName",
            "!Ref Dlq",
        ),
        aws(
            "AWS/DynamoDB",
            "ThrottledRequests",
            "TableName",
            "!Ref Table",
        ),
    ] {
        assert!(check(&wrong, &[], &types).is_some(), "{wrong:?} passed");
    }
}

#[test]
fn dashboard_rows_are_read_in_full_or_refused() {
    let row = json!(["LambdaIdempotency", "Claimed", "Service", "orders-api", {"stat": "Sum"}]);
    let w = dashboard_metric("t", &row).unwrap();
    assert_eq!(
        (w.metric.as_str(), w.dimensions.as_slice()),
        (
            "Claimed",
            &[("Service".to_owned(), "orders-api".to_owned())][..]
        )
    );
    let row = json!(["AWS/Lambda", "Errors", "FunctionName", "${SweeperFunction}"]);
    assert_eq!(
        dashboard_metric("t", &row).unwrap().dimensions[0].1,
        "!Ref SweeperFunction"
    );
    for bad in [
        json!(["...", "Replayed"]),
        json!([{"expression": "m1 + m2"}]),
        json!(["LambdaIdempotency", "Claimed", "Service"]),
    ] {
        assert!(dashboard_metric("t", &bad).is_err(), "{bad} was read");
    }
}

/// CloudWatch Logs bills every byte a function writes. `orders-api` as the
/// template deploys it (its `RUST_LOG` and metrics namespace) writes one
/// line per invocation, the invocation's metrics, on stdout and stderr
/// together: a first execution (two recovery points, a completion), a
/// replay and a mismatch each. `make bench` (BENCHMARKS.md, "Log bytes per
/// invocation") sets the bytes against Powertools'.
#[tokio::test]
async fn orders_api_as_deployed_writes_one_line_per_invocation() {
    use tokio::io::AsyncBufReadExt;
    let bin = crate::process::function_bin("orders-api");
    let tables = functions::tables().await.unwrap();
    let api = RuntimeApi::start().await.unwrap();
    let namespace = template_env("OrdersApiFunction", "IDEMPOTENCY_METRICS_NAMESPACE");
    let level = template_env("OrdersApiFunction", "RUST_LOG");
    let env = functions::orders_env(
        &api,
        &tables,
        &[
            ("IDEMPOTENCY_METRICS_NAMESPACE", namespace.as_str()),
            stack_env("OrdersApiFunction"),
            ("RUST_LOG", level.as_str()),
        ],
    );
    let bin = bin.to_str().expect("a UTF-8 path");
    let mut child = functions::spawn_logged(bin, &env).expect("spawn orders-api");
    let (lines_tx, mut lines_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    for stream in [
        Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        Box::new(stderr),
    ] {
        let tx = lines_tx.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line);
            }
        });
    }
    let body = r#"{"customer_id":"cus_1","amount":700,"currency":"EUR"}"#;
    let other = r#"{"customer_id":"cus_2","amount":1,"currency":"EUR"}"#;
    let timeout = Duration::from_secs(30);
    for (what, event, status, metric) in [
        (
            "first execution",
            functions::post_order_event("log-1", body),
            201,
            "Claimed",
        ),
        (
            "replay",
            functions::post_order_event("log-1", body),
            201,
            "Replayed",
        ),
        (
            "mismatch",
            functions::post_order_event("log-1", other),
            422,
            "FingerprintMismatch",
        ),
    ] {
        assert_eq!(
            response(api.invoke(event, timeout).await)["statusCode"],
            status,
            "{what}"
        );
        // The line is written before the answer; give the pipe a moment.
        let line = tokio::time::timeout(Duration::from_secs(5), lines_rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{what}: no line written"))
            .expect("the process is running");
        let parsed: Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("{what}: not an EMF line: {line}"));
        assert_eq!(parsed[metric], 1, "{what}: {line}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut extra = Vec::new();
        while let Ok(line) = lines_rx.try_recv() {
            extra.push(line);
        }
        assert!(
            extra.is_empty(),
            "{what} wrote more than its metrics: {extra:?}"
        );
    }
    child.kill().await.expect("kill orders-api");
}
