#!/usr/bin/env bash
# `make bench-engines`: round trips and latency per invocation on every store
# engine (DynamoDB Local, Redis, a Redis Cluster, PostgreSQL directly and
# through PgBouncer), each on a real server started here, through the same
# middleware (`bench engines`); updates the "Engines" section of
# BENCHMARKS.md. Also run by `make bench` (which is inside the harnesses
# already and calls it with --inside). Release build.
#
#   BENCH_ITERATIONS (default 2000) iterations per engine
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-out.sh
source scripts/bench-out.sh

if [ "${1:-}" != "--inside" ]; then
  cargo build --release --quiet -p tools --bin bench
  exec scripts/dynamodb-local.sh scripts/redis-local.sh scripts/postgres-local.sh "$0" --inside
fi

n="${BENCH_ITERATIONS:-2000}"
echo "bench-engines: DynamoDB Local, Redis, Redis Cluster, PostgreSQL, PostgreSQL through PgBouncer ($n iterations each)" >&2
"$target_dir/release/bench" engines "$n" >"$out/engines.json"
python3 scripts/bench/engines_report.py --engines "$out/engines.json" --md BENCHMARKS.md
echo "bench-engines: updated the engines section of BENCHMARKS.md" >&2
