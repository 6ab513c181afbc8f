//! The hot path of a [`RedisStore`]: the [`Store`] implementation, whose
//! claim, completion, recovery points and release are here with the
//! scripts' arguments and replies; what the sweeper and operators call
//! (listings, resolution, get, scan: the
//! [`SweepStore`](crate::store::SweepStore) side) is in `sweep.rs`.

use ::redis::{ScriptInvocation, Value};

use super::codec::{self, bytes, corrupt, decode, encode_headers, hash_fields, number, text};
use super::{shard_of, RedisStore, EXPIRY_GRACE_S, SCRIPTS};
use crate::error::Error;
use crate::record::{Record, StoredResponse};
use crate::store::rules::{fit, lease_ended_at};
use crate::store::{
    no_transactions, Checkpoint, CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest,
    Completion, Lease, Store, StoredRecord,
};

#[async_trait::async_trait]
impl Store for RedisStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        let shard = shard_of(&request.record_id);
        let reply = self
            .eval(
                "claim",
                SCRIPTS
                    .claim
                    .key(self.record_key(&request.record_id))
                    .key(self.index_key(shard))
                    .arg(&request.record_id)
                    .arg(&request.fingerprint)
                    .arg(&request.owner)
                    .arg(request.now_ms)
                    .arg(request.lease_expires_at_ms)
                    .arg(request.expires_at_s)
                    .arg(request.expires_at_s.saturating_add(EXPIRY_GRACE_S)),
            )
            .await?;
        let outcome = self.claim_outcome(request, &reply)?;
        if let ClaimOutcome::Claimed(lease) = &outcome {
            if let Err(err) = self.replicated("claim").await {
                // The handler has not run: give the key back on the primary
                // (best effort, it may be the one failing) so a retry that
                // still finds it there need not wait out the lease.
                if let Err(release) = self.release(lease).await {
                    tracing::warn!(record_id = %lease.record_id, error = %release, "a claim the replicas did not acknowledge could not be released; it ends with its lease");
                }
                return Err(err);
            }
        }
        Ok(outcome)
    }

    async fn complete(&self, request: CompleteRequest<'_>) -> Result<Completion, Error> {
        let lease = request.lease;
        no_transactions(self, &request.writes, "a completion")?;
        let mut invocation = self.fenced(
            &SCRIPTS.complete,
            &lease.record_id,
            lease.attempt,
            &lease.owner,
        );
        let completion =
            self.completion_args(&mut invocation, request.response, request.expires_at_s);
        let reply = self.eval("complete", &invocation).await?;
        match number(&reply) {
            // 2: completed by this very lease already (our own write again).
            Some(1 | 2) => {
                self.replicated("completion").await?;
                Ok(completion)
            }
            Some(0) => Err(Error::fenced(&lease.record_id, lease.attempt)),
            Some(3) => Err(Error::record_gone(&lease.record_id, lease.attempt)),
            _ => Err(self.unexpected("complete", &reply)),
        }
    }

    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
        no_transactions(self, &request.writes, "a recovery point")?;
        let (lease, checkpoint) = (request.lease, request.checkpoint);
        let reply = self
            .eval(
                "checkpoint",
                SCRIPTS
                    .checkpoint
                    .key(self.record_key(&lease.record_id))
                    .arg(lease.attempt)
                    .arg(&lease.owner)
                    .arg(checkpoint.to_json()),
            )
            .await?;
        match number(&reply) {
            Some(1) => self.replicated("recovery point").await,
            Some(0) => Err(Error::fenced(&lease.record_id, lease.attempt)),
            _ => Err(self.unexpected("checkpoint", &reply)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        let mut invocation = self.fenced(
            &SCRIPTS.release,
            &lease.record_id,
            lease.attempt,
            &lease.owner,
        );
        invocation.arg(lease_ended_at());
        let reply = self.eval("release", &invocation).await?;
        match number(&reply) {
            Some(1 | 2) => Ok(()),
            Some(0) => Err(Error::fenced(&lease.record_id, lease.attempt)),
            _ => Err(self.unexpected("release", &reply)),
        }
    }

    fn describe(&self) -> String {
        let what = if self.cluster {
            "Redis Cluster"
        } else {
            "Redis"
        };
        format!("{what} at {} (key prefix `{}`)", self.server, self.prefix)
    }

    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        let mut connection = self.connection.clone();
        let reply: Value = ::redis::cmd("HGETALL")
            .arg(self.record_key(record_id))
            .query_async(&mut connection)
            .await
            .map_err(|e| self.unavailable("get", e))?;
        let fields =
            hash_fields(reply).ok_or_else(|| corrupt(record_id, "its fields are not strings"))?;
        if fields.is_empty() {
            return Ok(None);
        }
        Ok(Some(unsized_record(decode(record_id, &fields)?)))
    }

    /// `PING` through the store's connection, which a store from
    /// [`open`](super::RedisStoreBuilder::open) makes on first use (on a
    /// cluster, to the nodes the client routes it to). Not counted in
    /// [`round_trips`](RedisStore::round_trips): it is no operation of the
    /// store's.
    async fn warm_up(&self) -> Result<(), Error> {
        let mut connection = self.connection.inner.clone();
        let _: Value = ::redis::cmd("PING")
            .query_async(&mut connection)
            .await
            .map_err(|e| self.unavailable("warm-up (PING)", e))?;
        Ok(())
    }
}

impl RedisStore {
    /// The fenced completion's arguments after id, attempt and owner.
    pub(super) fn completion_args(
        &self,
        invocation: &mut ScriptInvocation<'_>,
        response: &StoredResponse,
        expires_at_s: u64,
    ) -> Completion {
        let fitted = fit(response, self.max_response_bytes);
        let stored = &fitted.response;
        invocation
            .arg(expires_at_s)
            .arg(stored.status)
            .arg(encode_headers(&stored.headers))
            .arg(stored.body.kind())
            .arg(fitted.body.as_ref())
            .arg(if fitted.gzip { "gzip" } else { "" })
            .arg(expires_at_s.saturating_add(EXPIRY_GRACE_S));
        fitted.completion
    }

    fn checkpoint_of(&self, record_id: &str, value: &Value) -> Result<Option<Checkpoint>, Error> {
        bytes(value)
            .map(|b| codec::parse_checkpoint(record_id, b))
            .transpose()
    }

    /// What the claim script's `reply` says.
    fn claim_outcome(&self, request: &ClaimRequest, reply: &Value) -> Result<ClaimOutcome, Error> {
        let parts = match reply {
            Value::Array(parts) => parts.as_slice(),
            _ => return Err(self.unexpected("claim", reply)),
        };
        let id = &request.record_id;

        match parts {
            [tag, attempt, checkpoint] if number(tag) == Some(1) => {
                let attempt = number(attempt).ok_or_else(|| self.unexpected("claim", reply))?;
                Ok(ClaimOutcome::Claimed(Lease {
                    record_id: id.clone(),
                    owner: request.owner.clone(),
                    fingerprint: request.fingerprint.clone(),
                    attempt,
                    recovered: self.checkpoint_of(id, checkpoint)?,
                }))
            }
            // Rule 3: our own earlier try of this claim went through.
            [tag, attempt, fingerprint, checkpoint] if number(tag) == Some(2) => {
                match (number(attempt), text(fingerprint)) {
                    (Some(attempt), Some(fingerprint)) => Ok(ClaimOutcome::Claimed(Lease {
                        record_id: id.clone(),
                        owner: request.owner.clone(),
                        fingerprint,
                        attempt,
                        recovered: self.checkpoint_of(id, checkpoint)?,
                    })),
                    _ => Err(corrupt(id, "its attempt or fingerprint is not readable")),
                }
            }
            [tag, record] if number(tag) == Some(0) => {
                let fields = hash_fields(record.clone())
                    .ok_or_else(|| corrupt(id, "its fields are not strings"))?;
                Ok(ClaimOutcome::Exists(decode(id, &fields)?))
            }
            [tag, why] if number(tag) == Some(3) => Err(corrupt(
                id,
                &text(why).unwrap_or_else(|| "it is not a record".into()),
            )),
            _ => Err(self.unexpected("claim", reply)),
        }
    }
}

/// A record as [`Store::get`] and
/// [`SweepStore::scan`](crate::store::SweepStore::scan) return it here: Redis
/// bills no size per item.
pub(super) fn unsized_record(record: Record) -> StoredRecord {
    StoredRecord {
        record,
        size_bytes: None,
        write_units: None,
    }
}
