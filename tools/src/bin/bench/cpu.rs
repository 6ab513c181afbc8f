//! `bench cpu N` and `bench cpu-probe KIND N`: the library's CPU per
//! request on `MemoryStore`, the wrapped handler against the bare one.

use std::time::{Duration, Instant};

use lambda_http::{Body, IntoResponse, Request, Response};
use lambda_idempotency::{IdempotencyLayer, MemoryStore};
use serde_json::{json, Value};
use tower::{Layer, Service, ServiceExt};

use crate::handler::{body, handler, is_replayed, request, CACHE_ENTRIES, CACHE_MAX_AGE};
use crate::stats::{median, micros};
use crate::Result;

/// CPU time consumed by the calling thread, in nanoseconds (user + system),
/// from `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`. Declared here rather than
/// through a crate: the C library is linked anyway.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn thread_cpu_ns() -> Result<u64> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec (64-bit Linux layout) for the call's duration.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Err("clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed".into());
    }
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn thread_cpu_ns() -> Result<u64> {
    Err("thread CPU time is only read on 64-bit Linux".into())
}

/// Nanoseconds per request of every batch of a pass: thread CPU time and,
/// for comparison, wall time.
#[derive(Clone, Default)]
struct Cost {
    cpu: Vec<f64>,
    wall: Vec<f64>,
}

/// Requests are built, and responses checked and dropped, in batches of this
/// many, outside the timing.
const CPU_BATCH: usize = 64;

/// Run requests for `keys` through `svc` one after another and return their
/// cost per request, CPU and wall nanoseconds. Only the invocations are
/// timed: the requests are built before, and the responses checked and
/// dropped after, as a warm Lambda process handles one request and drops it
/// before the next. (Building all requests up front and keeping every
/// response would add the page faults and cache misses of a working set of
/// tens of megabytes, which is the benchmark's, not the library's.)
async fn time_batch<S>(
    svc: &S,
    keys: impl Iterator<Item = String>,
    replayed: bool,
) -> Result<(f64, f64)>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let batch = requests(keys);
    let n = batch.len().max(1) as f64;
    let mut responses = Vec::with_capacity(batch.len());
    let started = Instant::now();
    let start = thread_cpu_ns()?;
    for req in batch {
        // As `lambda_http::run` serves a handler: its answer is converted
        // with `IntoResponse` (the middleware converts the inner handler's
        // answer too, so that second conversion counts).
        let res = svc.clone().oneshot(req).await.map_err(|e| e.to_string())?;
        responses.push(res.into_response().await);
    }
    let cpu = (thread_cpu_ns()? - start) as f64 / n;
    let wall = micros(started.elapsed()) * 1000.0 / n;
    if let Some(bad) = responses
        .iter()
        .find(|r| r.status() != 201 || is_replayed(r) != replayed)
    {
        return Err(format!(
            "cpu pass: answer {} (replayed: {}), expected 201 (replayed: {replayed})",
            bad.status(),
            is_replayed(bad)
        ));
    }
    Ok((cpu, wall))
}

impl Cost {
    fn add(&mut self, (cpu, wall): (f64, f64)) {
        self.cpu.push(cpu);
        self.wall.push(wall);
    }
}

/// `keys` through `svc` in batches of [`CPU_BATCH`]; `fresh` gives each
/// batch a new service (with an empty store).
async fn cpu_pass<S>(
    svc: S,
    fresh: Option<fn() -> S>,
    keys: impl Iterator<Item = String>,
    replayed: bool,
) -> Result<Cost>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let keys: Vec<String> = keys.collect();
    let mut cost = Cost::default();
    for chunk in keys.chunks(CPU_BATCH) {
        let svc = fresh.map_or_else(|| svc.clone(), |f| f());
        cost.add(time_batch(&svc, chunk.iter().cloned(), replayed).await?);
    }
    Ok(cost)
}

fn requests(keys: impl Iterator<Item = String>) -> Vec<Request> {
    keys.map(|k| request(&k)).collect()
}

/// The services the CPU figures compare.
fn bare() -> impl Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone {
    handler(Duration::ZERO)
}

fn wrapped(
    cache: bool,
) -> impl Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone {
    let layer = IdempotencyLayer::new(MemoryStore::new());
    let layer = if cache {
        layer.local_cache(CACHE_ENTRIES, CACHE_MAX_AGE)
    } else {
        layer
    };
    layer.layer(handler(Duration::ZERO))
}

/// `wrapped(cache)` with the key `k` completed.
async fn wrapped_with_k(
    cache: bool,
) -> Result<impl Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone> {
    let svc = wrapped(cache);
    svc.clone()
        .oneshot(request("k"))
        .await
        .map_err(|e| e.to_string())?;
    Ok(svc)
}

/// Thread CPU per request of the variants in one run: bare, first execution
/// (a fresh store per batch, so the store holds at most one batch of
/// records), replay, cached replay, and first execution on one store that
/// grows to `n` records (each with its 1 KB response) over the run. The
/// variants take turns batch by batch, so a change in the machine's speed
/// meets all of them alike, as the latency rounds interleave their calls.
async fn cpu_run(n: usize, run: usize) -> Result<[Cost; 5]> {
    let bare_svc = bare();
    let replay_svc = wrapped_with_k(false).await?;
    let cached_svc = wrapped_with_k(true).await?;
    let grown_svc = wrapped(false);
    let mut costs: [Cost; 5] = Default::default();
    for start in (0..n).step_by(CPU_BATCH) {
        let end = (start + CPU_BATCH).min(n);
        let keys = |kind: &'static str| (start..end).map(move |i| format!("{kind}-{run}-{i}"));
        let same = || std::iter::repeat_n("k".to_owned(), end - start);
        costs[0].add(time_batch(&bare_svc, keys("bare"), false).await?);
        costs[1].add(time_batch(&wrapped(false), keys("first"), false).await?);
        costs[2].add(time_batch(&replay_svc, same(), true).await?);
        costs[3].add(time_batch(&cached_svc, same(), true).await?);
        costs[4].add(time_batch(&grown_svc, keys("grown"), false).await?);
    }
    Ok(costs)
}

pub(crate) async fn cpu(n: usize) -> Result<Value> {
    const RUNS: usize = 7;
    // A discarded run warms the allocator and the caches.
    cpu_run(n / 4, 0).await?;
    let mut runs = Vec::new();
    for run in 1..=RUNS {
        runs.push(cpu_run(n, run).await?);
    }
    // Every batch of every run, per variant. The typical request is the
    // median batch: a batch that an interrupt, a page fault or a neighbour on
    // the shared cores slowed down moves a mean, not the median.
    let batches = |i: usize, f: fn(&Cost) -> &Vec<f64>| -> Vec<f64> {
        runs.iter().flat_map(|r| f(&r[i]).iter().copied()).collect()
    };
    fn cpu(c: &Cost) -> &Vec<f64> {
        &c.cpu
    }
    fn wall(c: &Cost) -> &Vec<f64> {
        &c.wall
    }
    let med = |i: usize, f: fn(&Cost) -> &Vec<f64>| median(&mut batches(i, f));
    let mean = |i: usize| {
        let all = batches(i, cpu);
        all.iter().sum::<f64>() / all.len().max(1) as f64
    };
    let net = |i: usize, f: fn(&Cost) -> &Vec<f64>| med(i, f) - med(0, f);
    let names = [
        "bare",
        "first",
        "replay",
        "cached_replay",
        "first_grown_store",
    ];
    let per = |f: &dyn Fn(usize) -> f64| -> Value {
        (1..names.len())
            .map(|i| (names[i].to_owned(), json!(f(i))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    Ok(json!({
        "method": format!("thread CPU time (CLOCK_THREAD_CPUTIME_ID), current-thread runtime, MemoryStore, requests built and responses dropped in batches of {CPU_BATCH} outside the timing; per request = median over the batches of all runs"),
        "runs": RUNS, "requests_per_run": n, "batch": CPU_BATCH, "body_bytes": body().len(),
        "first_ns": net(1, cpu), "replay_ns": net(2, cpu), "cached_replay_ns": net(3, cpu),
        "first_grown_store_ns": net(4, cpu),
        "bare_handler_ns": med(0, cpu),
        "gross_ns": per(&|i| med(i, cpu)),
        "mean_net_ns": per(&|i| mean(i) - mean(0)),
        "wall_net_ns": per(&|i| net(i, wall)),
    }))
}

pub(crate) async fn cpu_probe(kind: &str, n: usize) -> Result<Value> {
    let distinct = (0..n).map(|i| format!("k{i}"));
    let same = std::iter::repeat_n("k".to_owned(), n);
    let cost = match kind {
        "bare" => cpu_pass(bare(), None, distinct, false).await?,
        "first" => cpu_pass(wrapped(false), Some(|| wrapped(false)), distinct, false).await?,
        "replay" | "cached" => {
            let svc = wrapped_with_k(kind == "cached").await?;
            cpu_pass(svc, None, same, true).await?
        }
        other => {
            return Err(format!(
                "cpu-probe kind {other:?}: use bare, first, replay or cached"
            ))
        }
    };
    let mean = cost.cpu.iter().sum::<f64>() / cost.cpu.len().max(1) as f64;
    Ok(json!({"requests": n, "cpu_ns_per_request": mean}))
}
