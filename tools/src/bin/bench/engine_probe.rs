//! `bench engine-probe N`: the engine's speed as this client meets it.

use serde_json::Value;

use crate::calls::{bare_put_timed, COMPARED};
use crate::handler::Fresh;
use crate::stats::Samples;
use crate::tables::{create_table_without_gsi, target_on};
use crate::Result;

/// `bench engine-probe N`: the Rust client's bare `PutItem` p50 on the
/// current engine, on a table of its own laid out as Powertools'.
pub(crate) async fn engine_probe(n: usize) -> Result<Value> {
    let t = target_on(create_table_without_gsi(false).await?).await;
    let mut fresh = Fresh::default();
    let mut samples = Samples::default();
    for _ in 0..n {
        bare_put_timed(&t, &COMPARED, &mut fresh, &mut Samples::default()).await?;
    }
    for _ in 0..n {
        bare_put_timed(&t, &COMPARED, &mut fresh, &mut samples).await?;
    }
    let (data, _) = samples.into_json();
    Ok(Value::Object(data))
}
