//! The store rules of docs/DESIGN.md section 4, exercised directly on each store.

use lambda_idempotency::{
    conformance,
    store::{CompleteRequest, StoredBody, StoredResponse},
    Store,
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
    resolve_stuck_fences_the_attempt_it_replaces,
);

// The cases are the crate's conformance suite (`lambda_idempotency::conformance`,
// feature `test-util`), the one a store of a user's own runs: here on every
// engine of the crate, both halves (the hot path's cases take the fixture's
// store as a `Store`, the sweep half's as the `SweepStore` it also is).
async fn first_claim_gets_attempt_one_and_a_second_owner_sees_it_in_progress(f: Fixture) {
    conformance::first_claim_gets_attempt_one_and_a_second_owner_sees_it_in_progress(&*f.store)
        .await;
}

async fn completed_record_is_returned_with_its_response(f: Fixture) {
    conformance::completed_record_is_returned_with_its_response(&*f.store).await;
}

async fn release_deletes_so_the_next_claim_gets_a_higher_attempt(f: Fixture) {
    conformance::release_deletes_so_the_next_claim_gets_a_higher_attempt(&*f.store).await;
}

async fn takeover_after_lease_expiry_fences_the_stale_owner(f: Fixture) {
    conformance::takeover_after_lease_expiry_fences_the_stale_owner(&*f.store).await;
}

async fn takeover_requires_the_same_fingerprint(f: Fixture) {
    conformance::takeover_requires_the_same_fingerprint(&*f.store).await;
}

async fn expired_record_is_reclaimed(f: Fixture) {
    conformance::expired_record_is_reclaimed(&*f.store).await;
}

async fn repeated_claim_by_the_same_owner_counts_as_claimed(f: Fixture) {
    conformance::repeated_claim_by_the_same_owner_counts_as_claimed(&*f.store).await;
}

async fn complete_and_release_by_a_stranger_are_fenced(f: Fixture) {
    conformance::complete_and_release_by_a_stranger_are_fenced(&*f.store).await;
}

async fn get_returns_the_record_as_stored_or_none(f: Fixture) {
    conformance::get_returns_the_record_as_stored_or_none(&*f.store).await;
}

async fn scan_pages_through_every_record_once(f: Fixture) {
    conformance::scan_pages_through_every_record_once(&*f.store).await;
}

async fn resolve_stuck_fences_the_attempt_it_replaces(f: Fixture) {
    conformance::resolve_stuck_fences_the_attempt_it_replaces(&*f.store).await;
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
        let lease = claimed(store.claim(&claim_request(&id, "a", 60_000)).await.unwrap());
        // Incompressible, so the stored body keeps its size.
        let body = StoredBody::Binary(integration_tests::noise(bytes, 7 + i as u64));
        store
            .complete(CompleteRequest::new(
                &lease,
                &StoredResponse::new(200, vec![], body),
                now_ms() / 1000 + 60,
            ))
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
