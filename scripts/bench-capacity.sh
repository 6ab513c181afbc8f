#!/usr/bin/env bash
# `make bench-capacity`: consumed read and write units per invocation, this
# library and Powertools for AWS Lambda (Python) on the same DynamoDB Local,
# metered by one proxy; updates the capacity section of BENCHMARKS.md. Also
# run by `make bench`. Also writes the full pass's costs into docs/SCALING.md. Capacity does not depend on the build profile: debug
# builds.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# shellcheck source=scripts/bench-out.sh
source scripts/bench-out.sh

if [ "${1:-}" != "--inside" ]; then
  # shellcheck source=scripts/bench-venv.sh
  source scripts/bench-venv.sh
  cargo build --quiet -p orders-api --bin orders-api
  cargo build --quiet -p tools --bin capacity
  exec scripts/dynamodb-local.sh "$0" --inside
fi

echo "bench-capacity: metering both libraries (about 2 minutes)" >&2
"$target_dir/debug/capacity" --python "$root/.tools/bench-venv/bin/python" \
  --orders-api "$target_dir/debug/orders-api" --out "$out/capacity.json"
"$root/.tools/bench-venv/bin/python" scripts/bench/capacity_report.py \
  --capacity "$out/capacity.json" --md BENCHMARKS.md --scaling docs/SCALING.md
echo "bench-capacity: updated the capacity section of BENCHMARKS.md and the full pass's costs in docs/SCALING.md" >&2
