//! The store rules of docs/DESIGN.md section 4, exercised directly on each store.

use std::time::Duration;

use lambda_idempotency::{
    store::{ClaimOutcome, ClaimRequest, Lease, Status, StoredBody, StoredResponse},
    ErrorKind, Store,
};

use crate::fixture::{claim_request, claimed, now_ms, on_both_stores, Fixture};

on_both_stores!(
    first_claim_gets_attempt_one_and_a_second_owner_sees_it_in_progress,
    completed_record_is_returned_with_its_response,
    release_deletes_so_the_next_claim_gets_a_higher_attempt,
    takeover_after_lease_expiry_fences_the_stale_owner,
    takeover_requires_the_same_fingerprint,
    expired_record_is_reclaimed,
    repeated_claim_by_the_same_owner_counts_as_claimed,
    complete_and_release_by_a_stranger_are_fenced,
    get_returns_the_record_as_stored_or_none,
    scan_pages_through_every_record_once,
);

fn request(id: &str, owner: &str, lease_ms: u64) -> ClaimRequest {
    ClaimRequest {
        fingerprint: "fp-a".into(),
        ..claim_request(id, owner, lease_ms)
    }
}

fn existing(outcome: ClaimOutcome) -> lambda_idempotency::store::Record {
    match outcome {
        ClaimOutcome::Exists(record) => record,
        ClaimOutcome::Claimed(lease) => panic!("expected an existing record, claimed {lease:?}"),
    }
}

fn response() -> StoredResponse {
    StoredResponse::new(
        201,
        vec![("x-a".into(), b"1".to_vec())],
        StoredBody::Text("done".into()),
    )
}

async fn first_claim_gets_attempt_one_and_a_second_owner_sees_it_in_progress(f: Fixture) {
    let lease = claimed(f.store.claim(&request("r", "a", 60_000)).await.unwrap());
    assert_eq!(lease.attempt, 1);
    let record = existing(f.store.claim(&request("r", "b", 60_000)).await.unwrap());
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(record.owner, "a");
    assert_eq!(record.attempt, 1);
    assert_eq!(record.fingerprint, "fp-a");
    assert!(record.response.is_none());
}

async fn completed_record_is_returned_with_its_response(f: Fixture) {
    let lease = claimed(f.store.claim(&request("r", "a", 60_000)).await.unwrap());
    let expires = now_ms() / 1000 + 7200;
    f.store
        .complete(&lease, &response(), expires)
        .await
        .unwrap();
    let record = existing(f.store.claim(&request("r", "b", 60_000)).await.unwrap());
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.response, Some(response()));
    assert_eq!(record.fingerprint, "fp-a");
    assert_eq!(record.expires_at_s, expires);
}

async fn release_deletes_so_the_next_claim_gets_a_higher_attempt(f: Fixture) {
    let lease = claimed(f.store.claim(&request("r", "a", 60_000)).await.unwrap());
    f.store.release(&lease).await.unwrap();
    let next = claimed(f.store.claim(&request("r", "b", 60_000)).await.unwrap());
    assert_eq!(next.owner, "b");
    assert_eq!(
        next.attempt, 1,
        "a released record is gone; the next claim starts afresh"
    );
}

async fn takeover_after_lease_expiry_fences_the_stale_owner(f: Fixture) {
    let stale = claimed(f.store.claim(&request("r", "a", 50)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(120)).await;
    let fresh = claimed(f.store.claim(&request("r", "b", 60_000)).await.unwrap());
    assert_eq!(fresh.attempt, 2);

    let err = f
        .store
        .complete(&stale, &response(), now_ms() / 1000 + 60)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let err = f.store.release(&stale).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);

    // The stale writes changed nothing: the record is still b's, in progress.
    let record = existing(f.store.claim(&request("r", "c", 60_000)).await.unwrap());
    assert_eq!(
        (record.owner.as_str(), record.attempt, record.status),
        ("b", 2, Status::InProgress)
    );
    f.store
        .complete(&fresh, &response(), now_ms() / 1000 + 60)
        .await
        .unwrap();
}

async fn takeover_requires_the_same_fingerprint(f: Fixture) {
    claimed(f.store.claim(&request("r", "a", 50)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(120)).await;
    let other = ClaimRequest {
        fingerprint: "fp-b".into(),
        ..request("r", "b", 60_000)
    };
    let record = existing(f.store.claim(&other).await.unwrap());
    assert_eq!(record.fingerprint, "fp-a");
}

async fn expired_record_is_reclaimed(f: Fixture) {
    let lease = claimed(f.store.claim(&request("r", "a", 60_000)).await.unwrap());
    // Completed but already past its TTL: DynamoDB's deletion lags, the item is
    // still readable, and the claim must treat it as absent, even for another body.
    f.store
        .complete(&lease, &response(), now_ms() / 1000 - 5)
        .await
        .unwrap();
    let other = ClaimRequest {
        fingerprint: "fp-b".into(),
        ..request("r", "b", 60_000)
    };
    let next = claimed(f.store.claim(&other).await.unwrap());
    assert_eq!(next.attempt, 2);
    let record = existing(f.store.claim(&request("r", "c", 60_000)).await.unwrap());
    assert_eq!(record.fingerprint, "fp-b");
    assert_eq!(record.status, Status::InProgress);
    assert!(record.response.is_none(), "the old response must be gone");
}

async fn repeated_claim_by_the_same_owner_counts_as_claimed(f: Fixture) {
    // What the store sees when the SDK retries a claim whose response was lost.
    let req = request("r", "a", 60_000);
    let first = claimed(f.store.claim(&req).await.unwrap());
    let again = claimed(f.store.claim(&req).await.unwrap());
    assert_eq!(first, again);
    f.store
        .complete(&again, &response(), now_ms() / 1000 + 60)
        .await
        .unwrap();
}

async fn complete_and_release_by_a_stranger_are_fenced(f: Fixture) {
    let lease = claimed(f.store.claim(&request("r", "a", 60_000)).await.unwrap());
    let wrong_owner = Lease {
        owner: "z".into(),
        ..lease.clone()
    };
    let wrong_attempt = Lease {
        attempt: 7,
        ..lease.clone()
    };
    for bad in [&wrong_owner, &wrong_attempt] {
        assert!(f
            .store
            .complete(bad, &response(), now_ms() / 1000 + 60)
            .await
            .unwrap_err()
            .is_fenced());
        assert!(f.store.release(bad).await.unwrap_err().is_fenced());
    }
    let missing = Lease {
        record_id: "nope".into(),
        ..lease.clone()
    };
    // Nothing to release is not a fence: the record is gone, which is what a
    // release wants (and what an SDK-retried release finds).
    f.store.release(&missing).await.unwrap();
    // Nor is a completion of a gone record: it is not stored, and says so.
    assert_eq!(
        f.store
            .complete(&missing, &response(), now_ms() / 1000 + 60)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::RecordGone
    );
    f.store
        .complete(&lease, &response(), now_ms() / 1000 + 60)
        .await
        .unwrap();
    // Completed by this lease: a second completion by it is its own write
    // coming back (as an SDK retry of a lost response is), not a fence, and
    // it changes nothing.
    let other = StoredResponse::new(500, vec![], StoredBody::Empty);
    f.store
        .complete(&lease, &other, now_ms() / 1000 + 60)
        .await
        .unwrap();
    // A stranger's completion of the completed record is still fenced.
    for bad in [&wrong_owner, &wrong_attempt] {
        assert!(f
            .store
            .complete(bad, &other, now_ms() / 1000 + 60)
            .await
            .unwrap_err()
            .is_fenced());
    }
    let record = existing(f.store.claim(&request("r", "c", 60_000)).await.unwrap());
    assert_eq!(record.response, Some(response()));
}

// What operators read: one record by id, and every record page by page.

async fn get_returns_the_record_as_stored_or_none(f: Fixture) {
    assert_eq!(f.store.get("absent").await.unwrap(), None);
    let lease = claimed(f.store.claim(&request("r", "a", 60_000)).await.unwrap());
    let found = f.store.get("r").await.unwrap().expect("claimed record");
    assert_eq!(found.record.status, Status::InProgress);
    assert_eq!(
        (found.record.attempt, found.record.owner.as_str()),
        (1, "a")
    );
    f.store
        .complete(&lease, &response(), now_ms() / 1000 + 60)
        .await
        .unwrap();
    let found = f.store.get("r").await.unwrap().expect("completed record");
    assert_eq!(found.record.status, Status::Completed);
    assert_eq!(found.record.response, Some(response()));
}

async fn scan_pages_through_every_record_once(f: Fixture) {
    let mut ids: Vec<String> = (0..7).map(|i| format!("r{i}")).collect();
    for id in &ids {
        claimed(f.store.claim(&request(id, "a", 60_000)).await.unwrap());
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = f.store.scan(cursor, 3).await.unwrap();
        pages += 1;
        assert_eq!(page.skipped, 0);
        assert!(page.records.len() <= 3);
        seen.extend(page.records.into_iter().map(|r| r.record.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    seen.sort();
    ids.sort();
    assert_eq!(seen, ids);
    assert!(pages >= 3, "pages of at most 3: {pages}");
}

/// The size `get` reports is the one DynamoDB bills: a `PutItem` of the same
/// item consumes the write units it predicts, at every response size.
#[tokio::test]
async fn dynamodb_sizes_match_the_billed_write_units() {
    use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
    let (store, _) = integration_tests::dynamo_store().await;
    let client = store.client().clone();
    let scratch = integration_tests::unique_name("sizes");
    // Without the index, so only the table's units count.
    client
        .create_table()
        .table_name(&scratch)
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name(lambda_idempotency::store::dynamodb::schema::ID)
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name(lambda_idempotency::store::dynamodb::schema::ID)
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    for (i, bytes) in [10usize, 900, 1_500, 3_000, 9_000].into_iter().enumerate() {
        let id = format!("size-{i}");
        let lease = claimed(store.claim(&request(&id, "a", 60_000)).await.unwrap());
        // Incompressible, so the stored body keeps its size.
        let body = StoredBody::Binary(integration_tests::noise(bytes, 7 + i as u64));
        store
            .complete(
                &lease,
                &StoredResponse::new(200, vec![], body),
                now_ms() / 1000 + 60,
            )
            .await
            .unwrap();
        let found = store.get(&id).await.unwrap().unwrap();
        let item = client
            .get_item()
            .table_name(store.table())
            .key(
                lambda_idempotency::store::dynamodb::schema::ID,
                aws_sdk_dynamodb::types::AttributeValue::S(id.clone()),
            )
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .unwrap();
        let put = client
            .put_item()
            .table_name(&scratch)
            .set_item(Some(item))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .unwrap();
        let billed = put
            .consumed_capacity()
            .and_then(|c| c.capacity_units())
            .unwrap();
        assert_eq!(
            found.write_units,
            Some(billed as u64),
            "{bytes}-byte body: {found:?}"
        );
        let size = found.size_bytes.unwrap();
        assert!(
            size > bytes as u64 && size < bytes as u64 + 400,
            "{size} for {bytes}"
        );
    }
}
