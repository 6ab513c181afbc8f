//! The hot path of a [`DynamoStore`]: the [`Store`] implementation, whose
//! claim, completion, recovery points and release are here with the writes
//! they make; what the sweeper and operators call (listings, resolution,
//! get, scan: the [`SweepStore`](crate::store::SweepStore) side) is in
//! `sweep.rs`.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use super::codec::{checkpoint_value, corrupt, decode, headers_value, item_size, n, s};
use super::schema::sweep_shard;
use super::{condition_failure_item, Clause, DynamoStore, WriteParts};
use crate::error::{Error, ErrorKind};
use crate::record::{Record, Status, StoredResponse};
use crate::store::rules::{
    claim_contended, claimable, completed_by, fit, lease_ended_at, may_take_over, own_claim,
    Fitted, ATTEMPT_EXHAUSTED,
};
use crate::store::{
    Checkpoint, CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest, Completion,
    DeferredWrites, Lease, Store, StoredRecord,
};

#[async_trait::async_trait]
impl Store for DynamoStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        // A claim that races another writer between its two conditional
        // writes (a takeover lost to a sweep, say) looks again; three rounds
        // are plenty, each is a real state change by someone else.
        let mut last = None;
        for _ in 0..3 {
            let existing = match self.claim_new_life(request).await? {
                Ok(lease) => return Ok(ClaimOutcome::Claimed(lease)),
                Err(existing) => existing,
            };
            if let Some(lease) = own_claim(&existing, request) {
                return Ok(ClaimOutcome::Claimed(lease));
            }
            if !may_take_over(&existing, request) {
                return Ok(ClaimOutcome::Exists(existing));
            }
            match self.take_over(request, &existing).await? {
                Ok(lease) => return Ok(ClaimOutcome::Claimed(lease)),
                Err(Some(now)) => {
                    if let Some(lease) = own_claim(&now, request) {
                        return Ok(ClaimOutcome::Claimed(lease));
                    }
                    if !claimable(&now, request) {
                        return Ok(ClaimOutcome::Exists(now));
                    }
                    last = Some(now);
                }
                // Deleted meanwhile (released or swept): a new life is free.
                Err(None) => {}
            }
        }
        match last {
            Some(record) => Ok(ClaimOutcome::Exists(record)),
            None => Err(claim_contended(&request.record_id)),
        }
    }

    async fn complete(&self, request: CompleteRequest<'_>) -> Result<Completion, Error> {
        let lease = request.lease;
        let (update, completion) = self.completion(lease, request.response, request.expires_at_s);
        if !request.writes.is_empty() {
            self.transaction_with_writes(lease, update, "the completion", request.writes)
                .await?;
            return Ok(completion);
        }
        let op = "UpdateItem (complete)";
        match self
            .update_fenced(&lease.record_id, update, true, op)
            .await?
        {
            None => Ok(completion),
            // The SDK retried a completion whose first try was applied
            // (its response was lost): the record is completed under our
            // own attempt and owner, which only our completion does.
            Some(item)
                if decode(&self.layout, &lease.record_id, &item)
                    .is_ok_and(|r| completed_by(&r, lease)) =>
            {
                Ok(completion)
            }
            // No item at all: released by an operator, or expired and
            // deleted; nothing is stored.
            Some(item) if item.is_empty() => {
                Err(Error::record_gone(&lease.record_id, lease.attempt))
            }
            Some(_) => Err(Error::fenced(&lease.record_id, lease.attempt)),
        }
    }

    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
        let (lease, checkpoint) = (request.lease, request.checkpoint);
        let update = self.checkpoint_update(lease, checkpoint);
        if !request.writes.is_empty() {
            let what = format!("the recovery point `{}`", checkpoint.name);
            return self
                .transaction_with_writes(lease, update, &what, request.writes)
                .await;
        }
        // Any refusal is a fence: the item is not asked back.
        let op = "UpdateItem (checkpoint)";
        match self
            .update_fenced(&lease.record_id, update, false, op)
            .await?
        {
            None => Ok(()),
            Some(_) => Err(Error::fenced(&lease.record_id, lease.attempt)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        // Rule 4: the delete is conditioned on there being no recovery
        // point; a record holding one has its lease ended instead (below).
        let delete = self
            .fenced_write(lease)
            .name("#checkpoint", &self.layout.checkpoint)
            .when(Clause::Absent("#checkpoint"));
        let op = "DeleteItem (release)";
        match self.delete_fenced(&lease.record_id, delete, op).await? {
            None => Ok(()),
            // Gone: what a release wants. Either the SDK retried a delete
            // whose first try was applied (its response was lost), or the
            // record expired or was swept; no newer attempt holds it.
            Some(item) if item.is_empty() => Ok(()),
            // Still ours, holding a recovery point: kept for the retry.
            Some(item)
                if decode(&self.layout, &lease.record_id, &item).is_ok_and(|r| {
                    r.status == Status::InProgress
                        && r.attempt == lease.attempt
                        && r.owner == lease.owner
                        && r.checkpoint.is_some()
                }) =>
            {
                self.end_lease(lease).await
            }
            Some(_) => Err(Error::fenced(&lease.record_id, lease.attempt)),
        }
    }

    fn describe(&self) -> String {
        #[cfg(feature = "sweep-via-stream")]
        if let (Some(_), Some(endpoint)) = (&self.stream, &self.stream_endpoint) {
            return format!(
                "DynamoDB table `{}` (its stream read at {endpoint})",
                self.table
            );
        }
        format!("DynamoDB table `{}`", self.table)
    }

    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(record_id)))
            .consistent_read(true)
            .customize()
            .config_override(self.limits())
            .send()
            .await
            .map_err(|err| self.unavailable("GetItem", err))?;
        out.item()
            .map(|item| sized(decode(&self.layout, record_id, item)?, item))
            .transpose()
    }

    /// One eventually consistent `GetItem` of [`WARM_UP_RECORD_ID`]; what it
    /// finds is ignored (nothing, unless someone wrote that id by hand).
    async fn warm_up(&self) -> Result<(), Error> {
        self.client
            .get_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(WARM_UP_RECORD_ID)))
            .customize()
            .config_override(self.limits())
            .send()
            .await
            .map_err(|err| self.unavailable("GetItem (warm-up)", err))?;
        Ok(())
    }
}

/// The record id [`DynamoStore`]'s [`Store::warm_up`] reads. The record ids
/// the entry points make are hex SHA-256 digests of the key and its scope,
/// never this text, so the read finds nothing.
pub const WARM_UP_RECORD_ID: &str = "lambda-idempotency:warm-up";

impl DynamoStore {
    /// The fenced recovery-point update, shared by the plain and the
    /// transactional path.
    fn checkpoint_update(&self, lease: &Lease, checkpoint: &Checkpoint) -> WriteParts {
        self.fenced_write(lease)
            .name("#checkpoint", &self.layout.checkpoint)
            .value(":checkpoint", checkpoint_value(checkpoint))
            .set("#checkpoint", ":checkpoint")
    }

    /// End `lease` now, keeping the record and its recovery point (rule 4):
    /// the next retry takes it over and resumes. Fenced like a release.
    async fn end_lease(&self, lease: &Lease) -> Result<(), Error> {
        let mut update = self
            .fenced_write(lease)
            .name("#lease", &self.layout.lease_expires_at)
            .value(":ended", n(lease_ended_at()))
            .set("#lease", ":ended");
        if self.sweep_index {
            // The index lists by lease end: it must see the record stuck now.
            update = update
                .name("#sweep_at", &self.layout.sweep_at)
                .set("#sweep_at", ":ended");
        }
        let op = "UpdateItem (end the lease)";
        match self
            .update_fenced(&lease.record_id, update, true, op)
            .await?
        {
            None => Ok(()),
            // Gone meanwhile (expired): what a release wants.
            Some(item) if item.is_empty() => Ok(()),
            Some(_) => Err(Error::fenced(&lease.record_id, lease.attempt)),
        }
    }

    /// `update` of the record (fenced on `lease`; `what` it writes, for
    /// messages) and the handler's writes in one `TransactWriteItems`: both
    /// commit or neither does.
    async fn transaction_with_writes(
        &self,
        lease: &Lease,
        update: WriteParts,
        what: &str,
        writes: DeferredWrites,
    ) -> Result<(), Error> {
        let writes = writes.into_typed::<TransactWriteItem>()?;
        let record_update = Update::builder()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&lease.record_id)))
            .condition_expression(update.condition())
            // Tells a record that is gone from one held by another attempt.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .update_expression(update.expression())
            .set_expression_attribute_names(Some(update.used_names()))
            .set_expression_attribute_values(Some(update.used_values()))
            .build()
            .map_err(|e| {
                Error::with_source(
                    ErrorKind::InvalidConfig,
                    format!("building {what} of record {}: {e}", lease.record_id),
                    e,
                )
            })?;
        let mut items = vec![TransactWriteItem::builder().update(record_update).build()];
        items.extend(writes);
        let items_len = items.len();
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .customize()
            .config_override(self.limits())
            .send()
            .await;
        let Err(err) = result else { return Ok(()) };
        let cancelled = err.as_service_error().and_then(|e| match e {
            TransactWriteItemsError::TransactionCanceledException(c) => Some(c),
            _ => None,
        });
        let reasons: Option<Vec<String>> = cancelled.map(|c| {
            c.cancellation_reasons()
                .iter()
                .map(|r| r.code().unwrap_or("None").to_owned())
                .collect()
        });
        // The first item is the record; with no old image, it is gone.
        let record_gone = cancelled
            .and_then(|c| c.cancellation_reasons().first())
            .is_some_and(|r| r.item().is_none_or(HashMap::is_empty));
        match reasons {
            // The first item is the record: its condition failing means
            // fenced, or gone when there is no record at all.
            Some(reasons)
                if reasons.first().map(String::as_str) == Some("ConditionalCheckFailed") =>
            {
                if record_gone {
                    Err(Error::record_gone(&lease.record_id, lease.attempt))
                } else {
                    Err(Error::fenced(&lease.record_id, lease.attempt))
                }
            }
            Some(reasons) => Err(Error::new(
                ErrorKind::TransactionCancelled,
                format!(
                    "{what} of record {} and the handler's {} write(s) were cancelled together, \
                     nothing was written; reasons per item (record first): [{}]",
                    lease.record_id,
                    reasons.len().saturating_sub(1),
                    reasons.join(", ")
                ),
            )),
            // Refused as invalid before it ran (over 100 items, two
            // operations on one item, ...): nothing committed.
            None if err.as_service_error().and_then(|e| e.code())
                == Some("ValidationException") =>
            {
                Err(Error::with_source(
                    ErrorKind::TransactionRejected,
                    format!(
                        "DynamoDB refused {what} of record {} with the handler's {} deferred \
                         write(s) as invalid, nothing was written: {}; check the writes given to \
                         defer_write (at most 99, one per item)",
                        lease.record_id,
                        items_len - 1,
                        DisplayErrorContext(&err)
                    ),
                    err,
                ))
            }
            None => Err(self.unavailable(&format!("TransactWriteItems ({what})"), err)),
        }
    }

    /// The fenced completion update, shared by the plain and the transactional
    /// path. An update rather than a put keeps the fingerprint (a later request
    /// with another body must still get a 422); removing the sweep attributes
    /// takes the record out of the sparse index.
    pub(super) fn completion(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
    ) -> (WriteParts, Completion) {
        let Fitted {
            response: stored,
            body,
            gzip,
            completion,
        } = fit(response, self.max_response_bytes);
        let mut update = self
            .fenced_write(lease)
            .name("#expires_at", &self.layout.expires_at)
            .name("#rs", &self.layout.response_status)
            .name("#rh", &self.layout.response_headers)
            .name("#rk", &self.layout.response_body_kind)
            .name("#rb", &self.layout.response_body)
            .name("#re", &self.layout.response_encoding)
            .name("#sweep_shard", &self.layout.sweep_shard)
            .name("#sweep_at", &self.layout.sweep_at)
            .name("#checkpoint", &self.layout.checkpoint)
            .value(":completed", s(Status::Completed.as_str()))
            .value(":expires_at", n(expires_at_s))
            .value(":rs", n(u64::from(stored.status)))
            .value(":rh", headers_value(&stored.headers))
            .value(":rk", s(stored.body.kind()))
            .set("#status", ":completed")
            .set("#expires_at", ":expires_at")
            .set("#rs", ":rs")
            .set("#rh", ":rh")
            .set("#rk", ":rk")
            .remove("#sweep_shard")
            .remove("#sweep_at")
            .remove("#checkpoint");
        update = if body.is_empty() {
            update.remove("#rb")
        } else {
            update
                .value(":rb", AttributeValue::B(body.into_owned().into()))
                .set("#rb", ":rb")
        };
        update = if gzip {
            update.value(":re", s("gzip")).set("#re", ":re")
        } else {
            update.remove("#re")
        };
        (update, completion)
    }

    /// The `UpdateItem` of a claim of `request`'s record, a new life or a
    /// takeover, still without its condition and expression: the names of
    /// the attributes both write or test (and of the index's lease end,
    /// where there is an index), the values they share, and the record as
    /// it was asked back should the claim lose.
    fn claim_update(&self, request: &ClaimRequest) -> UpdateItemFluentBuilder {
        let update = self
            .client
            .update_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&request.record_id)))
            .expression_attribute_names("#status", &self.layout.status)
            .expression_attribute_names("#fingerprint", &self.layout.fingerprint)
            .expression_attribute_names("#owner", &self.layout.owner)
            .expression_attribute_names("#lease", &self.layout.lease_expires_at)
            .expression_attribute_names("#expires_at", &self.layout.expires_at)
            .expression_attribute_names("#attempt", &self.layout.attempt)
            .expression_attribute_values(":now_s", n(request.now_ms / 1000))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":fingerprint", s(&request.fingerprint))
            .expression_attribute_values(":owner", s(&request.owner))
            .expression_attribute_values(":lease", n(request.lease_expires_at_ms))
            .expression_attribute_values(":expires_at", n(request.expires_at_s))
            // A lost claim learns the existing record in this same round trip.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if self.sweep_index {
            // Both set the index's lease end to the new lease.
            update.expression_attribute_names("#sweep_at", &self.layout.sweep_at)
        } else {
            update
        }
    }

    /// The claim of a new life: the record is absent, or expired (TTL
    /// deletion lags by days). It removes whatever an earlier life left (its
    /// response, its recovery point), so nothing of another request can reach
    /// this one. `Err(record)` is the record as it is when the condition fails.
    async fn claim_new_life(&self, request: &ClaimRequest) -> Result<Result<Lease, Record>, Error> {
        // The index's keys only where the index is the listing: written on
        // every claim, they cost an index write unit each time.
        let index_keys = if self.sweep_index {
            ", #sweep_shard = :shard, #sweep_at = :lease"
        } else {
            ""
        };
        let mut update = self
            .claim_update(request)
            // DynamoDB's numbers go past u64: a new life after the largest
            // attempt count would store one no reader can parse.
            .condition_expression(
                "(attribute_not_exists(#id) OR #expires_at < :now_s) \
                 AND (attribute_not_exists(#attempt) OR #attempt < :largest)",
            )
            .update_expression(format!(
                "SET #status = :in_progress, #fingerprint = :fingerprint, #owner = :owner, \
                 #lease = :lease, #expires_at = :expires_at, \
                 #attempt = if_not_exists(#attempt, :zero) + :one{index_keys} \
                 REMOVE #rs, #rh, #rb, #rk, #re, #checkpoint"
            ))
            .expression_attribute_names("#id", self.layout.partition_key_name())
            .expression_attribute_names("#rs", &self.layout.response_status)
            .expression_attribute_names("#rh", &self.layout.response_headers)
            .expression_attribute_names("#rb", &self.layout.response_body)
            .expression_attribute_names("#rk", &self.layout.response_body_kind)
            .expression_attribute_names("#re", &self.layout.response_encoding)
            .expression_attribute_names("#checkpoint", &self.layout.checkpoint)
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":largest", n(u64::MAX))
            // Only the new attempt comes back: an expired record's old
            // response is never read, let alone decompressed.
            .return_values(ReturnValue::UpdatedNew);
        if self.sweep_index {
            update = update
                .expression_attribute_names("#sweep_shard", &self.layout.sweep_shard)
                .expression_attribute_values(
                    ":shard",
                    s(&sweep_shard(&request.record_id).to_string()),
                );
        }
        let result = update
            .customize()
            .config_override(self.limits())
            .send()
            .await;
        match result {
            Ok(output) => {
                let attempt = output
                    .attributes()
                    .and_then(|item| item.get(&self.layout.attempt))
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| {
                        corrupt(&request.record_id, "the claim did not return its attempt")
                    })?;
                Ok(Ok(Lease {
                    record_id: request.record_id.clone(),
                    owner: request.owner.clone(),
                    fingerprint: request.fingerprint.clone(),
                    attempt,
                    recovered: None,
                }))
            }
            Err(err) => match condition_failure_item(&err) {
                Some(item) => {
                    let existing = decode(&self.layout, &request.record_id, &item)?;
                    // Expired, so only the attempt clause can have failed.
                    if existing.expires_at_s < request.now_ms / 1000 {
                        return Err(corrupt(&request.record_id, ATTEMPT_EXHAUSTED));
                    }
                    Ok(Err(existing))
                }
                None => Err(self.unavailable("UpdateItem (claim)", err)),
            },
        }
    }

    /// Take over `seen`, an abandoned attempt of the same request in the same
    /// life: fenced on the attempt seen, so two takers cannot both win, and
    /// keeping the recovery point, which comes back with the new attempt.
    /// `Err(record)` is the record as it is when the condition fails (`None`
    /// when it is gone).
    async fn take_over(
        &self,
        request: &ClaimRequest,
        seen: &Record,
    ) -> Result<Result<Lease, Option<Record>>, Error> {
        // The index entry follows the new lease, where there is an index.
        let index_key = if self.sweep_index {
            ", #sweep_at = :lease"
        } else {
            ""
        };
        let next = seen
            .attempt
            .checked_add(1)
            .ok_or_else(|| corrupt(&request.record_id, ATTEMPT_EXHAUSTED))?;
        let result = self
            .claim_update(request)
            .condition_expression(
                "#status = :in_progress AND #attempt = :seen AND #lease < :now_ms \
                 AND #fingerprint = :fingerprint AND #expires_at >= :now_s",
            )
            .update_expression(format!(
                "SET #owner = :owner, #lease = :lease, #expires_at = :expires_at, \
                 #attempt = :next{index_key}"
            ))
            .expression_attribute_values(":seen", n(seen.attempt))
            .expression_attribute_values(":next", n(next))
            .expression_attribute_values(":now_ms", n(request.now_ms))
            // The recovery point as of the takeover itself: a checkpoint the
            // stale attempt committed after `seen` was read is inherited too.
            .return_values(ReturnValue::AllNew)
            .customize()
            .config_override(self.limits())
            .send()
            .await;
        match result {
            Ok(output) => {
                let record = decode(
                    &self.layout,
                    &request.record_id,
                    output.attributes().unwrap_or(&HashMap::new()),
                )?;
                Ok(Ok(Lease {
                    record_id: request.record_id.clone(),
                    owner: request.owner.clone(),
                    fingerprint: request.fingerprint.clone(),
                    attempt: record.attempt,
                    recovered: record.checkpoint,
                }))
            }
            Err(err) => match condition_failure_item(&err) {
                Some(item) if item.is_empty() => Ok(Err(None)),
                Some(item) => Ok(Err(Some(decode(&self.layout, &request.record_id, &item)?))),
                None => Err(self.unavailable("UpdateItem (takeover)", err)),
            },
        }
    }
}

/// `record` with the billed size of `item`, the item it was decoded from.
pub(super) fn sized(
    record: Record,
    item: &HashMap<String, AttributeValue>,
) -> Result<StoredRecord, Error> {
    let size = item_size(item);
    Ok(StoredRecord {
        record,
        size_bytes: Some(size),
        write_units: Some(size.div_ceil(1024).max(1)),
    })
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;

    use super::*;
    use crate::record::StoredBody;

    #[test]
    fn a_completion_compresses_its_body_once() {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        let store = DynamoStore::builder(Client::from_conf(config), "t")
            .open()
            .unwrap();
        let lease = Lease::for_tests();
        let response = StoredResponse::new(200, vec![], StoredBody::Text("abc".repeat(2_000)));
        crate::record::COMPRESSIONS.with(|n| n.set(0));
        let (update, completion) = store.completion(&lease, &response, 60);
        assert_eq!(completion, Completion::Stored);
        assert_eq!(crate::record::COMPRESSIONS.with(|n| n.get()), 1);
        assert_eq!(update.value_of(":re"), Some(&s("gzip")));
        assert!(update.expression().contains("#re = :re"));
    }
}
