#!/usr/bin/env bash
# `make bench-logs`: log bytes per invocation (first execution, replay, key
# in progress) of `orders-api` as deployed and of Powertools for AWS Lambda
# (Python) with its Metrics utility on the same scenario, each on a fresh
# DynamoDB Local; updates the log section of BENCHMARKS.md. Also run by
# `make bench`. What a function writes does not depend on the build
# profile: debug builds.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-out.sh
source scripts/bench-out.sh
n="${BENCH_LOG_INVOCATIONS:-50}"

# shellcheck source=scripts/bench-venv.sh
source scripts/bench-venv.sh
cargo build --quiet -p orders-api --bin orders-api
cargo build --quiet -p tools --bin bench
echo "bench-logs: orders-api, then Powertools Python ($n invocations per kind)" >&2
scripts/dynamodb-local.sh "$target_dir/debug/bench" logs "$n" "$target_dir/debug/orders-api" >"$out/logs.json"
scripts/dynamodb-local.sh "$bench_python" scripts/bench/powertools_logs.py "$n" >"$out/powertools-logs.json"
"$bench_python" scripts/bench/logs_report.py --logs "$out/logs.json" \
  --powertools "$out/powertools-logs.json" --md BENCHMARKS.md
echo "bench-logs: updated the log section of BENCHMARKS.md" >&2
