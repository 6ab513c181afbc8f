//! One integration-test binary (fast to link): every behaviour runs on
//! DynamoDB Local and, where the store is what is under test, also on the
//! in-memory store and on Redis.

mod alarms;
mod beyond;
mod body_key;
mod contract;
mod docs_in_step;
mod dynamo;
mod engines;
mod event_options;
mod events;
mod fail_fast;
mod fault_harness;
mod fixture;
mod fuzz;
mod iam;
mod interleavings;
mod layout;
mod model;
mod offload;
mod orders;
mod phases;
mod postgres;
mod powertools_cutover;
mod powertools_expressions;
mod powertools_writers;
mod process;
mod rare_paths;
mod reattach;
mod redis_failover;
mod redis_store;
mod regressions;
mod store_rules;
mod stream_batches;
mod stream_chaos;
mod stream_discovery;
mod stuck_guarantee;
mod sweeper;
mod warm_up;

/// Sample events that are not HTTP requests, checked by their own tests.
pub const NON_HTTP_EVENTS: &[&str] = &[
    "scheduled-sweep.json",
    "sqs-order-events-batch.json",
    "async-invoke-order-event.json",
];
