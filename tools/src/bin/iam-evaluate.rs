//! A second IAM policy evaluator for `scripts/check-iam.py`, from a kept
//! library (the `iam-rs` crate): every call the check evaluates with its own
//! evaluator (scripts/iam_policy.py) is evaluated here too, and the check
//! fails where the two disagree.
//!
//! Reads JSON lines `{"policy": <IAM policy document>, "action": "...",
//! "resource": "<ARN>", "context": {"key": "value" | ["values"]}}` on
//! stdin; writes one line per request: `allow`, `explicit deny`,
//! `implicit deny`, or `error: <why>` (a request or policy it cannot
//! evaluate).
//!
//!     cargo run -q -p tools --bin iam-evaluate < requests.jsonl

use std::io::{BufRead, Write};

use iam_rs::{
    evaluate_policy, Arn, Context, ContextValue, Decision, IAMPolicy, IAMRequest, Principal,
    PrincipalId,
};
use serde_json::Value;

fn decide(line: &str) -> Result<&'static str, String> {
    let request: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let policy =
        IAMPolicy::from_json(&request["policy"].to_string()).map_err(|e| format!("policy: {e}"))?;
    let action = request["action"].as_str().ok_or("no action")?;
    let resource = request["resource"].as_str().ok_or("no resource")?;
    let arn = Arn::parse(resource).map_err(|e| format!("resource {resource}: {e:?}"))?;
    let mut context = Context::new();
    if let Some(keys) = request["context"].as_object() {
        for (key, value) in keys {
            let value = match value {
                Value::String(s) => ContextValue::String(s.clone()),
                Value::Array(items) => ContextValue::StringList(
                    items
                        .iter()
                        .map(|i| i.as_str().map(str::to_owned).ok_or("a non-string value"))
                        .collect::<Result<_, _>>()?,
                ),
                other => return Err(format!("context {key}: {other}")),
            };
            context.insert(key.clone(), value);
        }
    }
    let caller = Principal::Aws(PrincipalId::String(
        "arn:aws:iam::123456789012:role/caller".to_owned(),
    ));
    let request = IAMRequest::new_with_context(caller, action, arn, context);
    match evaluate_policy(&policy, &request).map_err(|e| e.to_string())? {
        Decision::Allow => Ok("allow"),
        Decision::Deny => Ok("explicit deny"),
        Decision::NotApplicable => Ok("implicit deny"),
    }
}

fn main() -> Result<(), String> {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = match decide(&line) {
            Ok(decision) => decision.to_owned(),
            Err(e) => format!("error: {e}"),
        };
        writeln!(out, "{answer}").map_err(|e| format!("stdout: {e}"))?;
    }
    Ok(())
}
