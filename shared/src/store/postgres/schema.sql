-- The idempotency records of lambda-idempotency's PostgresStore: one row per
-- record. Run by PostgresStore::migrate (in a transaction, under an advisory
-- lock, with search_path set to the store's schema), or by hand.

CREATE TABLE IF NOT EXISTS idempotency_records (
    -- Hash of the scope (namespace, tenant, method, route, key).
    id                     text    PRIMARY KEY,
    -- IN_PROGRESS or COMPLETED.
    status                 text    NOT NULL CHECK (status IN ('IN_PROGRESS', 'COMPLETED')),
    -- Fingerprint of the request that claimed the record.
    fingerprint            text    NOT NULL,
    -- Fencing token: incremented by every claim.
    attempt                bigint  NOT NULL,
    -- Random token of the invocation holding (or last holding) the lease.
    owner                  text    NOT NULL,
    -- End of the current lease, epoch milliseconds.
    lease_expires_at       bigint  NOT NULL,
    -- End of the record's life, epoch seconds: past it the row is absent.
    expires_at             bigint  NOT NULL,
    -- The stored response, once completed.
    response_status        integer,
    response_header_names  text[],
    response_header_values bytea[],
    response_body          bytea,
    -- empty, text or binary.
    response_body_kind     text,
    -- gzip when response_body is compressed.
    response_encoding      text,
    -- The last recovery point: {"name", "data", "attempt"}.
    checkpoint             jsonb
);

-- The sweeper's listing: records in progress by lease end.
CREATE INDEX IF NOT EXISTS idempotency_records_stuck
    ON idempotency_records (lease_expires_at, id)
    WHERE status = 'IN_PROGRESS';

-- Clean-up of expired records, in bounded batches.
CREATE INDEX IF NOT EXISTS idempotency_records_expiry
    ON idempotency_records (expires_at);
