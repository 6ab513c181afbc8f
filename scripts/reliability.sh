#!/usr/bin/env bash
# `make reliability`: storm, crash injection and store fault injection against
# DynamoDB Local (see tests/src/bin/reliability.rs); writes RELIABILITY.md.
#   RELIABILITY_SIZE=full (default) | ci (the reduced run `make test` does)
#   RELIABILITY_OUT (default RELIABILITY.md)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${RELIABILITY_SIZE:-full}"
out="${RELIABILITY_OUT:-RELIABILITY.md}"
# orders-api alone, as Lambda tooling builds it; the driver separately.
cargo build --quiet -p orders-api --bin orders-api
cargo build --quiet -p integration-tests --bin reliability
scripts/dynamodb-local.sh target/debug/reliability "$size" target/debug/orders-api "$out" >/dev/null
echo "reliability ($size): no violations; report in $out"
