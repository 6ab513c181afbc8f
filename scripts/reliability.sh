#!/usr/bin/env bash
# `make reliability`: the property tests (fuzzing, model check), then storm,
# crash injection and store fault injection against DynamoDB Local (the model
# check also on Redis and PostgreSQL, started for it; see
# tools/src/bin/reliability/); writes RELIABILITY.md from what they measured.
#   RELIABILITY_SIZE=full (default) | ci (the reduced run `make test` does)
#   RELIABILITY_OUT (default RELIABILITY.md)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh
size="${RELIABILITY_SIZE:-full}"
out="${RELIABILITY_OUT:-RELIABILITY.md}"
# orders-api alone, as Lambda tooling builds it; the driver separately.
cargo build --quiet -p orders-api --bin orders-api
cargo build --quiet -p tools --bin reliability
# Sections 4 and 5: each property test appends what its cases met to this
# file (tests/tests/it/fuzz.rs, model.rs); the driver reports it.
log="$target_dir/reliability-properties-$size.jsonl"
rm -f "$log"
RELIABILITY_PROPERTY_LOG="$log" scripts/dynamodb-local.sh scripts/redis-local.sh scripts/postgres-local.sh \
  cargo test --quiet -p integration-tests --test it -- fuzz:: model::
scripts/dynamodb-local.sh "$target_dir/debug/reliability" "$size" "$target_dir/debug/orders-api" "$out" "$log" >/dev/null
echo "reliability ($size): no violations; report in $out"
