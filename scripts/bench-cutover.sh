#!/usr/bin/env bash
# `make bench-cutover`: what the cut-over window from Powertools
# (`PowertoolsRecords`) costs a first execution, and that it costs nothing
# once the window ends, on a fresh DynamoDB Local (release build); updates
# the cut-over section of BENCHMARKS.md. Also run by `make bench`.
#   BENCH_CUTOVER_ITERATIONS (default 1000) first executions per variant
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-out.sh
source scripts/bench-out.sh
# shellcheck source=scripts/bench-venv.sh
source scripts/bench-venv.sh
cargo build --release --quiet -p tools --bin bench
n="${BENCH_CUTOVER_ITERATIONS:-1000}"
echo "bench-cutover: $n first executions without a cut-over, with the window open, with it over" >&2
scripts/dynamodb-local.sh "$target_dir/release/bench" cutover "$n" >"$out/cutover.json"
"$bench_python" scripts/bench/cutover_report.py --cutover "$out/cutover.json" --md BENCHMARKS.md
echo "bench-cutover: updated the cut-over section of BENCHMARKS.md" >&2
