//! The claim lifecycle, once for every entry point: the HTTP middleware
//! and the event path only read keys and shape answers around it.
//!
//! ```text
//! begin ──► local cache ──► claim (store, through its layers) ──┬─► Replay / Mismatch
//!                  ▲                                            ├─► Run(guard)
//!                  │                                            └─► InProgress ──► (wait_for) poll
//!                  └──────────── the key freed while waiting ◄───────────────────────────┘
//! guard.run(handler) ──┬─► error or panic ──► abandon (release, fenced)
//!                      └─► value ──► finish(outcome) ──► Stored | Oversized | Lost | Refused | Unknown
//! ```
//!
//! Every rare-path rule lives here: what a release after committed work
//! does, a record gone while the handler ran, fencing, a recovery point of
//! unknown fate, and the metrics of each step. The off switch stays with
//! the entry points, which then call their handler unwrapped.
//!
//! It is public for an entry point of your own (a framework this crate has
//! no layer for, a Step Functions task): read the key, make the record id
//! and fingerprint, then let the lifecycle decide.
//!
//! ```
//! use lambda_idempotency::lifecycle::{self, Begun, Finished};
//! use lambda_idempotency::store::{StoredBody, StoredResponse};
//! use lambda_idempotency::{IdempotencyConfig, MemoryStore};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let config = IdempotencyConfig::new(MemoryStore::new());
//! for attempt in 0..2 {
//!     let begun = lifecycle::begin(&config, "task#42".into(), "fp".into(), None, || None)
//!         .await
//!         .expect("the store answers");
//!     match begun {
//!         Begun::Run(guard) => {
//!             assert_eq!(attempt, 0, "the second attempt replays");
//!             let (guard, out) = guard.run(async { Ok::<_, String>("done") }).await.unwrap();
//!             let stored = StoredResponse::new(200, vec![], StoredBody::Text(out.into()));
//!             assert!(matches!(guard.finish(stored).await, Finished::Stored));
//!         }
//!         Begun::Replay(record) => {
//!             assert_eq!(record.response.unwrap().body.bytes(), b"done");
//!         }
//!         other => panic!("{other:?}"),
//!     }
//! }
//! # });
//! ```

mod guard;
mod lease;
mod wait;

use std::time::Duration;

use crate::config::IdempotencyConfig;
use crate::error::Error;
use crate::metrics::Event;
use crate::record::{Record, Status};
use crate::store::{ClaimOrigin, ClaimOutcome, ClaimRequest};

pub use self::guard::{Finished, Guard};

/// What [`begin`] decided.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "a Begun dropped unanswered loses the decision: `Run`'s guard leaves the record in progress until its lease ends (the next retry runs the handler again), and a replay, conflict or mismatch is never answered"]
pub enum Begun<'a> {
    /// This invocation holds the key: run the handler under the guard.
    Run(Guard<'a>),
    /// The same request completed: the record to replay (counted, and kept
    /// in the local cache when it has its outcome).
    Replay(Record),
    /// The same request still runs elsewhere, for at most `retry_after`;
    /// the record holding it.
    InProgress {
        /// How long the holder's lease has left: when a retry may find the
        /// outcome, or take the key over.
        retry_after: Duration,
        /// The record holding the key.
        existing: Box<Record>,
    },
    /// The key was first used by a different request: its record (counted).
    Mismatch(Box<Record>),
}

/// Begin the lifecycle of record `record_id` for the request with
/// `fingerprint`: replay it from the local cache, or claim it in the store
/// with a lease drawn from the invocation's deadline (epoch milliseconds).
/// When the same request is in progress elsewhere and the config waits
/// ([`IdempotencyConfig::wait_for`]), wait for its outcome: a replay when
/// it completes, a claim of the key when it frees, and `InProgress` when
/// the wait ends first. `origin` describes the request as it was sent, for
/// a store layer that reads it
/// ([`Store::reads_origin`](crate::Store::reads_origin)); it is only
/// called then (once per claim). A store that fails is counted and its
/// error returned: the handler must not run. The off switch
/// ([`IdempotencyConfig::is_disabled`]) is the caller's to check, and so is
/// counting an `InProgress` answer (its metric is the caller's conflict).
#[must_use = "the claim may be won: a `Begun::Run` dropped leaves the record in progress until its lease ends, and the next retry runs the handler again"]
pub async fn begin<'a>(
    config: &'a IdempotencyConfig,
    record_id: String,
    fingerprint: String,
    deadline_ms: Option<u64>,
    origin: impl Fn() -> Option<ClaimOrigin>,
) -> Result<Begun<'a>, Error> {
    let started = crate::clock::now_ms();
    let mut polls = wait::Polls::new(wait::until(config, started, deadline_ms), started);
    loop {
        let begun = claim(
            config,
            record_id.clone(),
            fingerprint.clone(),
            deadline_ms,
            &origin,
        )
        .await?;
        let Begun::InProgress { existing, .. } = begun else {
            return Ok(begun);
        };
        // `None`: the key freed while waiting, so claiming again can win.
        if let Some(answer) = polls
            .wait(config, &record_id, &fingerprint, existing)
            .await?
        {
            return Ok(answer);
        }
    }
}

/// One claim: the local cache, then the store.
async fn claim<'a>(
    config: &'a IdempotencyConfig,
    record_id: String,
    fingerprint: String,
    deadline_ms: Option<u64>,
    origin: &impl Fn() -> Option<ClaimOrigin>,
) -> Result<Begun<'a>, Error> {
    if let Some(cached) = config
        .cache
        .as_ref()
        .and_then(|c| c.get(&record_id, crate::clock::now_ms() / 1000))
    {
        if cached.fingerprint == fingerprint {
            config.count(Event::CacheHit);
            tracing::debug!("idempotent outcome replayed from the local cache");
            return Ok(Begun::Replay((*cached).clone()));
        }
        config.count(Event::FingerprintMismatch);
        tracing::debug!("idempotency key reused with a different request");
        return Ok(Begun::Mismatch(Box::new((*cached).clone())));
    }
    let (mut request, capped) = ClaimRequest::start(
        record_id,
        fingerprint,
        deadline_ms,
        config.leases,
        config.expires_after,
        &config.progress,
    )
    .inspect_err(|_| config.count(Event::StoreError))?;
    if capped {
        config.count(Event::LeaseCapped);
    }
    if config.store.reads_origin() {
        request.origin = origin();
    }
    let outcome = match config.store.claim(&request).await {
        Ok(outcome) => outcome,
        Err(err) => {
            config.count(Event::StoreError);
            return Err(err);
        }
    };
    Ok(match outcome {
        ClaimOutcome::Claimed(lease) => {
            config.count(Event::Claimed);
            // The hot path logs at debug (logs are billed per byte); a
            // takeover of an earlier attempt is rare and worth an info line.
            if lease.attempt > 1 {
                tracing::info!(
                    attempt = lease.attempt,
                    resumes_from = lease.recovered.as_ref().map(|c| c.name.as_str()),
                    "idempotency key taken over from an earlier attempt"
                )
            } else {
                tracing::debug!("idempotency key claimed")
            }
            Begun::Run(Guard::new(config, lease, request.now_ms))
        }
        ClaimOutcome::Exists(record) if record.fingerprint != request.fingerprint => {
            config.count(Event::FingerprintMismatch);
            tracing::debug!("idempotency key reused with a different request");
            Begun::Mismatch(Box::new(record))
        }
        ClaimOutcome::Exists(record) if record.status == Status::Completed => {
            replayed(config, record)
        }
        ClaimOutcome::Exists(record) => Begun::InProgress {
            retry_after: Duration::from_millis(
                record.lease_expires_at_ms.saturating_sub(request.now_ms),
            ),
            existing: Box::new(record),
        },
    })
}

/// A completed record found by a claim or a wait, to replay: counted and
/// cached. A completed record always has its outcome (the stores' decoding
/// makes sure); the entry points answer one without it as they would an
/// abandoned key, so it is neither counted nor cached.
fn replayed(config: &IdempotencyConfig, record: Record) -> Begun<'_> {
    if record.response.is_some() {
        config.count(Event::Replayed);
        tracing::debug!("idempotent outcome replayed");
        if let Some(cache) = &config.cache {
            cache.put(record.clone());
        }
    }
    Begun::Replay(record)
}
