#!/usr/bin/env bash
# `make demo`: the example API end to end on this machine. Installs cargo-lambda
# (PyPI, pinned in scripts/python-tools.txt) into .tools/venv, starts DynamoDB Local, creates the tables from
# template.yaml, serves orders-api with `cargo lambda watch`, plays the narrated
# scenario, and stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# shellcheck source=scripts/python-tools.sh
source scripts/python-tools.sh
# shellcheck source=scripts/common.sh
source scripts/common.sh
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh

if [ "${1:-}" != "--inside" ]; then
  exec scripts/dynamodb-local.sh "$0" --inside
fi

# From here DynamoDB Local runs (AWS_ENDPOINT_URL_DYNAMODB is set).
export IDEMPOTENCY_TABLE=demo-idempotency ORDERS_TABLE=demo-orders
echo "demo: building orders-api and the demo driver" >&2
# orders-api is built on its own, exactly as `cargo lambda watch` runs it
# (`cargo run -p orders-api`): building it together with the test crate would
# unify features differently and make watch rebuild everything on the first call.
cargo build --quiet -p orders-api --bin orders-api
cargo build --quiet -p tools --bin demo
"$target_dir/debug/demo" create-tables

log="$root/.tools/cargo-lambda-watch.log"
: >"$log"
watch_pid=""
start_watch() {
  port=$(free_port)
  cargo lambda watch --quiet --ignore-changes --invoke-port "$port" --concurrency 2 --timeout 15 \
    --env-var "IDEMPOTENCY_TABLE=$IDEMPOTENCY_TABLE,ORDERS_TABLE=$ORDERS_TABLE,SIMULATED_PROVIDER_LATENCY_MS=1500" \
    --env-var "IDEMPOTENCY_MAX_LEASE_SECONDS=3,ORDERS_API_DEMO_CRASHES=1" \
    --env-var "IDEMPOTENCY_ALLOW_ANONYMOUS=true" \
    --env-var "IDEMPOTENCY_STORE_TIMEOUT_MS=$IDEMPOTENCY_STORE_TIMEOUT_MS" \
    --env-var "AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB,AWS_REGION=$AWS_REGION" \
    --env-var "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY,RUST_LOG=warn" \
    -p orders-api >>"$log" 2>&1 &
  watch_pid=$!
  wait_listening "demo: cargo lambda watch" "$port" "$watch_pid" "$log" 150 0.2
  echo "demo: cargo lambda watch serving orders-api on 127.0.0.1:$port" >&2
}
stop_watch() {
  [ -n "$watch_pid" ] || return 0
  # cargo lambda watch starts one orders-api process per concurrent instance:
  # stop the ones this watch started (its descendants), then watch itself.
  local children
  children=$(pgrep -P "$watch_pid" 2>/dev/null || true)
  for child in $children; do pkill -P "$child" 2>/dev/null || true; done
  pkill -P "$watch_pid" 2>/dev/null || true
  kill "$watch_pid" 2>/dev/null || true
  wait "$watch_pid" 2>/dev/null || true
  watch_pid=""
}
trap stop_watch EXIT
fail() {
  echo "--- cargo lambda watch log ---" >&2; tail -n 40 "$log" >&2
  exit 1
}

# With the tools, so it shares their build of every dependency
# (scripts/workspace-hack.py).
cargo build --quiet -p tools -p lambda-idempotency-cli --bin lambda-idempotency
cli="$target_dir/debug/lambda-idempotency"
# The operator's view (cli/README.md): each command must succeed and
# show what the step left behind, or the demo fails.
operate() {
  local expect=$1
  shift
  echo
  echo "  \$ lambda-idempotency $*"
  local out
  out=$(NO_COLOR=1 "$cli" "$@") || { echo "demo: lambda-idempotency $* failed" >&2; exit 1; }
  sed 's/^/  /' <<<"$out"
  grep -q -- "$expect" <<<"$out" || { echo "demo: expected \"$expect\" in that output" >&2; exit 1; }
}

start_watch
"$target_dir/debug/demo" play "http://127.0.0.1:$port" || fail
# Step 8 killed a function process mid-request. cargo lambda watch does not
# replace a dead instance (and its other instance is left with a broken
# runtime API connection), so start a fresh watch: Lambda's next instance.
stop_watch
echo
echo "== The operator looks at what the crash left (lambda-idempotency, the CLI)"
operate "charged" list --in-progress
operate "IN_PROGRESS" inspect --key order-0003 --path /orders
operate "with a recovery point" stats
operate "would be kept" release --dry-run --force "$("$cli" --json inspect --key order-0003 --path /orders | python3 -c 'import json,sys; print(json.load(sys.stdin)["record_id"])')"
start_watch
"$target_dir/debug/demo" resume "http://127.0.0.1:$port" || fail
echo
echo "== The crashed order's record at the end: completed by its second attempt"
operate '"attempt":2' --json inspect --key order-0003 --path /orders
operate "COMPLETED" inspect --key order-0003 --path /orders
