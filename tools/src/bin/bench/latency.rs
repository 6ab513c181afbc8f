//! `bench latency N R`: the comparison pass and the diagnostic pass on
//! DynamoDB Local (see the header of main.rs), then the requests per
//! invocation kind.

use std::time::Duration;

use integration_tests::RequestCounter;
use lambda_http::{Body, Request, Response};
use lambda_idempotency::store::StoredResponse;
use lambda_idempotency::{Fingerprinter, IdempotencyLayer};
use serde_json::{json, Value};
use tower::{Layer, Service, ServiceExt};

use crate::calls::{
    bare_put_timed, exact_requests, first_and_replay, Names, COMPARED, DEPLOYED, NO_GSI, PLAIN,
};
use crate::handler::{
    body, handler, handler_response, is_replayed, request, timed_call, Fresh, CACHE_ENTRIES,
    CACHE_MAX_AGE,
};
use crate::stats::Samples;
use crate::tables::{create_table_without_gsi, describe, target_on, Target};
use crate::Result;

/// DynamoDB requests per call over 50 calls of `svc` (the `what` probe),
/// each request from `next` and each answer checked by `ok`.
async fn probe<S>(
    what: &str,
    counter: &RequestCounter,
    svc: &S,
    mut next: impl FnMut() -> Request,
    ok: impl Fn(&Response<Body>) -> bool,
) -> Result<f64>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    const CALLS: u64 = 50;
    let before = counter.get();
    for _ in 0..CALLS {
        let (_, res) = timed_call(svc, next()).await?;
        if !ok(&res) {
            return Err(format!("probe {what} answered {}", res.status()));
        }
    }
    Ok((counter.get() - before) as f64 / CALLS as f64)
}

/// Everything one latency iteration uses: the three tables (see
/// [`latency`]) and the cached middleware, on the compared table.
struct Env<'a, A, C> {
    compared: &'a Target<A>,
    deployed: &'a Target<A>,
    no_gsi: &'a Target<A>,
    cached_svc: &'a C,
    cached_key: &'a str,
    fingerprint: &'a str,
    stored: &'a StoredResponse,
}

impl<A, C> Env<'_, A, C>
where
    A: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
    C: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    /// The comparison pass: one call of each kind Powertools is timed on
    /// too, each timed alone, in a fixed order, so both tools put the same
    /// load on their DynamoDB Local while they are timed.
    async fn iteration(&self, fresh: &mut Fresh, samples: &mut Samples) -> Result<()> {
        let compared = self.compared;
        bare_put_timed(compared, &COMPARED, fresh, samples).await?;
        first_and_replay(compared, &COMPARED, fresh, samples).await?;

        let before = compared.counter.get();
        let (us, res) = timed_call(self.cached_svc, request(self.cached_key)).await?;
        samples.add("cached_replay", us, compared.counter.get() - before);
        if res.status() != 201 || !is_replayed(&res) {
            return Err(format!(
                "cached replay answered {} unreplayed",
                res.status()
            ));
        }
        Ok(())
    }

    /// The diagnostic pass: everything again, with the library's exact
    /// requests, on the deployed table, on it without its index, and on the
    /// compared table (DynamoDB Local charges a stream and an index on every
    /// write to the table, the floor's included), the three in one pass so
    /// their figures share its conditions.
    async fn diagnostic_iteration(&self, fresh: &mut Fresh, samples: &mut Samples) -> Result<()> {
        self.diagnose(self.deployed, &DEPLOYED, fresh, samples)
            .await?;
        self.diagnose(self.no_gsi, &NO_GSI, fresh, samples).await?;
        self.diagnose(self.compared, &PLAIN, fresh, samples).await
    }

    /// One diagnostic round on one table: the bare `PutItem`, a first
    /// execution and its replay through the middleware, and the library's
    /// exact requests (with this pass's fingerprint and stored response).
    async fn diagnose(
        &self,
        t: &Target<A>,
        names: &Names,
        fresh: &mut Fresh,
        samples: &mut Samples,
    ) -> Result<()> {
        bare_put_timed(t, names, fresh, samples).await?;
        first_and_replay(t, names, fresh, samples).await?;
        exact_requests(t, names, fresh, self.fingerprint, self.stored, samples).await
    }
}

/// The latency passes on three tables, all created before the first write
/// (DynamoDB Local slows every write to a stream-enabled table created after
/// other stream tables took writes, so `scripts/bench.sh` also gives each
/// run an engine of its own): the compared table, laid out as Powertools'
/// (partition key only, no stream, no index), which the comparison pass
/// uses; the deployed table of template.yaml (stream and sparse `sweep`
/// index); and that table without its index. Only the diagnostic pass
/// touches the last two.
pub(crate) async fn latency(n: usize, rounds: usize) -> Result<Value> {
    let deployed =
        target_on(integration_tests::create_table(&integration_tests::client().await).await).await;
    let no_gsi = target_on(create_table_without_gsi(true).await?).await;
    let compared = target_on(create_table_without_gsi(false).await?).await;
    let cached_svc = IdempotencyLayer::new(compared.store.clone())
        .local_cache(CACHE_ENTRIES, CACHE_MAX_AGE)
        .layer(handler(Duration::ZERO));
    let tables = json!({
        "compared": describe(&compared.store).await?,
        "gsi": describe(&deployed.store).await?,
        "no_gsi": describe(&no_gsi.store).await?,
    });

    let fingerprint = Fingerprinter::new().fingerprint("POST", "/orders", &[], body().as_bytes());
    let stored =
        StoredResponse::from_http(&handler_response(body().as_bytes()).map_err(|e| e.to_string())?);
    let mut fresh = Fresh::default();
    let cached_key = fresh.key("cached");
    let res = cached_svc
        .clone()
        .oneshot(request(&cached_key))
        .await
        .map_err(|e| e.to_string())?;
    if res.status() != 201 {
        return Err(format!(
            "cached key's first execution answered {}",
            res.status()
        ));
    }

    // Warm-up: connections, caches, and DynamoDB Local's JIT, which takes a
    // thousand or so calls to settle.
    let mut warm = Samples::default();
    let env = Env {
        compared: &compared,
        deployed: &deployed,
        no_gsi: &no_gsi,
        cached_svc: &cached_svc,
        cached_key: &cached_key,
        fingerprint: &fingerprint,
        stored: &stored,
    };
    for _ in 0..300 {
        env.iteration(&mut fresh, &mut warm).await?;
        env.diagnostic_iteration(&mut fresh, &mut warm).await?;
    }

    let mut rounds_data = Vec::new();
    for _ in 0..rounds {
        let mut samples = Samples::default();
        for _ in 0..n {
            env.iteration(&mut fresh, &mut samples).await?;
        }
        // After the comparison pass, never inside it: these calls would
        // triple the engine's load (and its garbage collections) during the
        // timed calls of this tool only.
        for _ in 0..n {
            env.diagnostic_iteration(&mut fresh, &mut samples).await?;
        }
        let (mut data, requests) = samples.into_json();
        data.insert("requests_counted".into(), Value::Object(requests));
        data.insert("calls".into(), json!(n));
        rounds_data.push(Value::Object(data));
    }

    // Requests per invocation kind, counted by the SDK interceptor.
    let per_call = |before: u64, after: u64, calls: u64| (after - before) as f64 / calls as f64;
    let counter = &compared.counter;
    let first_requests = probe(
        "first execution",
        counter,
        &compared.svc,
        || request(&fresh.key("probe")),
        |res| res.status() == 201,
    )
    .await?;
    let key = fresh.key("probe");
    compared
        .svc
        .clone()
        .oneshot(request(&key))
        .await
        .map_err(|e| e.to_string())?;
    let replay_requests = probe(
        "replay",
        counter,
        &compared.svc,
        || request(&key),
        is_replayed,
    )
    .await?;
    let cached_requests = probe(
        "cached replay",
        counter,
        &cached_svc,
        || request(&cached_key),
        is_replayed,
    )
    .await?;
    let slow =
        IdempotencyLayer::new(compared.store.clone()).layer(handler(Duration::from_millis(500)));
    let busy = fresh.key("busy");
    let running = tokio::spawn(slow.clone().oneshot(request(&busy)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = counter.get();
    let res = compared
        .svc
        .clone()
        .oneshot(request(&busy))
        .await
        .map_err(|e| e.to_string())?;
    let in_progress_requests = per_call(before, counter.get(), 1);
    if res.status() != 409 {
        return Err(format!("in-progress answered {}", res.status()));
    }
    running
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;

    Ok(json!({
        "tool": "lambda-idempotency",
        "iterations": n,
        "rounds": rounds,
        "body_bytes": body().len(),
        "local_cache": {"entries": CACHE_ENTRIES, "max_age_s": CACHE_MAX_AGE.as_secs()},
        "tables": tables,
        "requests": {
            "first": first_requests,
            "replay": replay_requests,
            "in_progress": in_progress_requests,
            "cached_replay": cached_requests,
        },
        "rounds_data": rounds_data,
    }))
}
