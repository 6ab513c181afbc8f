#!/usr/bin/env bash
# `make reliability`: the property tests (fuzzing, model check) and the fault
# harness (every store call of every feature failed on purpose, at this size),
# then storm,
# crash injection and store fault injection against DynamoDB Local (the model
# check also on Redis and PostgreSQL, started for it; see
# tools/src/bin/reliability/); writes RELIABILITY.md from what they measured.
#   RELIABILITY_SIZE=full (default) | ci (the reduced run `make test` does)
#   RELIABILITY_OUT (default RELIABILITY.md)
#   RELIABILITY_CHECK_COUNTS=1: compare the deterministic counts with
#     reliability-counts.json instead of writing them there (make test)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh
size="${RELIABILITY_SIZE:-full}"
out="${RELIABILITY_OUT:-RELIABILITY.md}"
# orders-api alone, as Lambda tooling builds it; the driver separately.
cargo build --quiet -p orders-api --bin orders-api
cargo build --quiet -p tools --bin reliability
# Sections 4, 5 and 6: each property test and each fault harness test
# appends what its cases met to this file (tests/tests/it/fuzz.rs, model.rs,
# fault_harness.rs, stream_chaos.rs); the driver reports it. The harness's cut-over cases read
# records Powertools (Python) writes.
# shellcheck source=scripts/bench-venv.sh
source scripts/bench-venv.sh
# The fuzz tests' cases come from one fixed seed, so their counts are the same
# at every run, as the fault harness's and stream_chaos's are. Another seed
# (PROPTEST_RNG_SEED=N make reliability) explores other cases; its counts are
# then neither written nor checked. The model tests' outcomes also depend on
# the real clock (their sweeps), so theirs are not compared.
default_seed=5300
seed="${PROPTEST_RNG_SEED:-$default_seed}"
export PROPTEST_RNG_SEED="$seed"
log="$target_dir/reliability-properties-$size.jsonl"
rm -f "$log"
# Four tests at once: on two cores the reduced run's tests took 244 s where
# they took 273 s two at a time; the counts do not depend on it.
RELIABILITY_PROPERTY_LOG="$log" FAULT_HARNESS_SIZE="$size" \
  IDEMPOTENCY_TEST_POWERTOOLS_PYTHON="$bench_python" \
  scripts/dynamodb-local.sh scripts/s3-local.sh scripts/redis-local.sh scripts/postgres-local.sh \
  cargo test --quiet --workspace --test it -- --test-threads 4 fuzz:: model:: fault_harness:: stream_chaos:: interleavings::
scripts/dynamodb-local.sh "$target_dir/debug/reliability" "$size" "$target_dir/debug/orders-api" "$out" "$log" >/dev/null
# The fault harness's, stream_chaos's and the fuzz tests' counts are the same
# at every run of the same code and size: written to reliability-counts.json
# here, checked against it by `make test` (RELIABILITY_CHECK_COUNTS=1), which
# fails when they differ (scripts/reliability-counts.py).
if [ "$seed" != "$default_seed" ]; then
  echo "reliability: PROPTEST_RNG_SEED=$seed is not the default ($default_seed): reliability-counts.json neither written nor checked" >&2
elif [ "${RELIABILITY_CHECK_COUNTS:-0}" = 1 ]; then
  python3 scripts/reliability-counts.py check "$size" "$log" reliability-counts.json
else
  python3 scripts/reliability-counts.py write "$size" "$log" reliability-counts.json
fi
echo "reliability ($size): no violations; report in $out"
