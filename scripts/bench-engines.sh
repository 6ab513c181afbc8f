#!/usr/bin/env bash
# `make bench-engines`: round trips and latency per invocation on the store
# engines other than DynamoDB (whose figures are the main report's), each on a
# real server started here; updates the "Other engines" section of
# BENCHMARKS.md. Also run by `make bench`. Release build.
#
#   BENCH_ITERATIONS (default 2000) samples per kind
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh
out="$target_dir/bench"
mkdir -p "$out"

if [ "${1:-}" != "--inside" ]; then
  cargo build --release --quiet -p tools --bin bench_engines
  exec scripts/postgres-local.sh "$0" --inside
fi

n="${BENCH_ITERATIONS:-2000}"
echo "bench-engines: PostgreSQL ($n samples per kind)" >&2
"$target_dir/release/bench_engines" postgres "$n" >"$out/engine-postgres.json"
python3 scripts/bench/engines_report.py --md BENCHMARKS.md "$out"/engine-*.json
echo "bench-engines: updated the engines section of BENCHMARKS.md" >&2
