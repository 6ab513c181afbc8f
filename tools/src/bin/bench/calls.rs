//! The calls the latency passes time on one table, and what their samples
//! are called: the bare `PutItem` (the round-trip floor), a first execution
//! and its replay through the middleware, and the library's exact requests
//! issued alone through `Store`.

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_http::{Body, Request, Response};
use lambda_idempotency::{
    store::{now_ms, ClaimOutcome, ClaimRequest, CompleteRequest, Status, StoredResponse},
    DynamoStore, Store,
};
use tower::Service;

use crate::handler::{is_replayed, request, timed_call, Fresh};
use crate::stats::Samples;
use crate::tables::Target;
use crate::Result;

/// What the samples of one table are called.
pub(crate) struct Names {
    bare: &'static str,
    first: &'static str,
    replay: &'static str,
    /// A first execution's and a replay's latency outside store calls.
    first_own: &'static str,
    replay_own: &'static str,
    claim: &'static str,
    complete: &'static str,
    replay_claim: &'static str,
}

/// The comparison pass, on a table laid out as Powertools' (partition key
/// only: no stream, no index), the same four kinds of call as Powertools
/// makes; its exact requests are not made in that pass.
pub(crate) const COMPARED: Names = Names {
    bare: "bare",
    first: "first",
    replay: "replay",
    first_own: "first_own",
    replay_own: "replay_own",
    claim: "plain_claim",
    complete: "plain_complete",
    replay_claim: "plain_replay_claim",
};

/// The diagnostic pass on the deployed table (stream and `sweep` index).
pub(crate) const DEPLOYED: Names = Names {
    bare: "idx_bare",
    first: "idx_first",
    replay: "idx_replay",
    first_own: "idx_first_own",
    replay_own: "idx_replay_own",
    claim: "claim",
    complete: "complete",
    replay_claim: "replay_claim",
};

/// The diagnostic pass on the deployed table without its index (the stream kept).
pub(crate) const NO_GSI: Names = Names {
    bare: "no_gsi_bare",
    first: "no_gsi_first",
    replay: "no_gsi_replay",
    first_own: "no_gsi_first_own",
    replay_own: "no_gsi_replay_own",
    claim: "no_gsi_claim",
    complete: "no_gsi_complete",
    replay_claim: "no_gsi_replay_claim",
};

/// The diagnostic pass on the compared table (neither stream nor index).
pub(crate) const PLAIN: Names = Names {
    bare: "plain_bare",
    first: "plain_first",
    replay: "plain_replay",
    first_own: "plain_first_own",
    replay_own: "plain_replay_own",
    claim: "plain_claim",
    complete: "plain_complete",
    replay_claim: "plain_replay_claim",
};

/// The claim the middleware would send for `key`: the same record id, the
/// same fingerprint of the body, a 32-hex-digit owner, a 15-minute lease and a
/// 24-hour expiry (the defaults outside Lambda).
fn claim_request(key: &str, owner: String, fingerprint: &str) -> ClaimRequest {
    let now = now_ms();
    let lease = now + 15 * 60 * 1000;
    ClaimRequest {
        record_id: lambda_idempotency::scope::RecordScope::new("POST", "/orders", key).record_id(),
        fingerprint: fingerprint.to_owned(),
        owner,
        now_ms: now,
        lease_expires_at_ms: lease,
        expires_at_s: now / 1000 + 24 * 3600,
        origin: None,
    }
}

/// The library's own requests, issued alone: claim of an absent record,
/// completion with the handler's 1 KB response, and claim of that now
/// completed record (what a replay sends). Through `Store`, so the requests
/// are exactly the library's; the timing includes the store's building of
/// the request and decoding of the answer (microseconds of library CPU).
pub(crate) async fn exact_requests<S>(
    t: &Target<S>,
    names: &Names,
    fresh: &mut Fresh,
    fingerprint: &str,
    stored: &StoredResponse,
    samples: &mut Samples,
) -> Result<()> {
    let key = fresh.key("exact");
    let claim = claim_request(&key, fresh.owner(), fingerprint);
    let outcome = samples
        .measure(names.claim, &t.counter, async {
            t.store.claim(&claim).await.map_err(|e| e.to_string())
        })
        .await?;
    let ClaimOutcome::Claimed(lease) = outcome else {
        return Err(format!("claim of a fresh key found a record: {outcome:?}"));
    };

    let expires_at = now_ms() / 1000 + 24 * 3600;
    samples
        .measure(names.complete, &t.counter, async {
            t.store
                .complete(CompleteRequest::new(&lease, stored, expires_at))
                .await
                .map_err(|e| e.to_string())
        })
        .await?;

    let again = claim_request(&key, fresh.owner(), fingerprint);
    let outcome = samples
        .measure(names.replay_claim, &t.counter, async {
            t.store.claim(&again).await.map_err(|e| e.to_string())
        })
        .await?;
    match outcome {
        ClaimOutcome::Exists(record)
            if record.status == Status::Completed && record.response.is_some() =>
        {
            Ok(())
        }
        other => Err(format!(
            "claim of a completed record did not find it: {other:?}"
        )),
    }
}

/// A first execution of a fresh key, then a replay of it, through the middleware.
pub(crate) async fn first_and_replay<S>(
    t: &Target<S>,
    names: &Names,
    fresh: &mut Fresh,
    samples: &mut Samples,
) -> Result<()>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let key = fresh.key("bench");
    let res = middleware_call(t, names.first, names.first_own, &key, samples).await?;
    if res.status() != 201 || is_replayed(&res) {
        return Err(format!("first execution answered {}", res.status()));
    }
    let res = middleware_call(t, names.replay, names.replay_own, &key, samples).await?;
    if res.status() != 201 || !is_replayed(&res) {
        return Err(format!("replay answered {} unreplayed", res.status()));
    }
    Ok(())
}

/// One call of `key` through `t`'s middleware, recorded under `kind` (its
/// latency and the requests counted around it) and under `own` (its latency
/// minus the time its store calls took). A first execution and a replay are
/// timed alike, so this is shared; the caller checks the answer, after the
/// timing.
async fn middleware_call<S>(
    t: &Target<S>,
    kind: &'static str,
    own: &'static str,
    key: &str,
    samples: &mut Samples,
) -> Result<Response<Body>>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let req = request(key);
    let before = t.counter.get();
    let in_store = t.in_store.micros();
    let (us, res) = timed_call(&t.svc, req).await?;
    samples.add(kind, us, t.counter.get() - before);
    samples.add(own, us - (t.in_store.micros() - in_store), 0);
    Ok(res)
}

/// The floor's bare `PutItem`, timed, on `t`'s table.
pub(crate) async fn bare_put_timed<S>(
    t: &Target<S>,
    names: &Names,
    fresh: &mut Fresh,
    samples: &mut Samples,
) -> Result<()> {
    let key = fresh.key("bare");
    samples
        .measure(names.bare, &t.counter, bare_put(&t.store, &key))
        .await?;
    Ok(())
}

/// The bare floor: one conditional PutItem of a small item with the same client.
async fn bare_put(store: &DynamoStore, key: &str) -> Result<()> {
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item("id", AttributeValue::S(format!("bare-{key}")))
        .item("n", AttributeValue::N("1".into()))
        .condition_expression("attribute_not_exists(id)")
        .send()
        .await
        .map(|_| ())
        .map_err(|e| {
            format!(
                "bare put: {}",
                aws_sdk_dynamodb::error::DisplayErrorContext(e)
            )
        })
}
