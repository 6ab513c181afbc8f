//! One integration-test binary (fast to link): every behaviour runs on
//! DynamoDB Local and, where the store is what is under test, also on the
//! in-memory store.

mod contract;
mod dynamo;
mod fixture;
mod store_rules;
