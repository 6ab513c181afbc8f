#!/usr/bin/env bash
# The first request after a cold start as it happens on AWS, over TLS:
# `orders-api` (its store's warm-up on and off) and Powertools for AWS
# Lambda (Python) through one TLS-terminating proxy in front of a fresh
# DynamoDB Local, with a test CA made for the run that both clients trust
# (scripts/bench/tls-certs.sh; the proxy is `bench cold-tls`'s own,
# tools/src/bin/bench/tls_proxy.rs). Writes bench/cold-tls.json in the
# target directory, which `make bench` puts in BENCHMARKS.md (the cold-start
# goal and the TLS split); run alone, it prints the medians. Release builds.
#
#   BENCH_COLD_RUNS (default 20) cold runs of each of the three variants
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# shellcheck source=scripts/bench-out.sh
source scripts/bench-out.sh

# `--no-build`: the binaries are built and the venv made (`make bench`).
if [ "${1:-}" != "--inside" ]; then
  if [ "${1:-}" != "--no-build" ]; then
    # shellcheck source=scripts/bench-venv.sh
    source scripts/bench-venv.sh
    cargo build --release --quiet -p orders-api --bin orders-api
    cargo build --release --quiet -p tools --bin bench
  fi
  certs=$(mktemp -d)
  trap 'rm -rf "$certs"' EXIT
  scripts/bench/tls-certs.sh "$certs"
  scripts/dynamodb-local.sh "$0" --inside "$certs"
  "$root/.tools/bench-venv/bin/python" - "$out/cold-tls.json" <<'PY'
import json, statistics, sys
data = json.load(open(sys.argv[1]))
fields = ("process_start_ms", "import_ms", "client_setup_ms", "before_hello_ms", "handshake_ms", "warm_up_request_ms",
          "first_execution_ms", "init_ms", "first_invocation_ms", "second_invocation_ms", "total_ms")
for variant in ("orders_api_warm_up_on", "orders_api_warm_up_off", "powertools"):
    runs = data[variant]
    medians = {f: statistics.median(r[f] for r in runs) for f in fields if f in runs[0]}
    print(f"bench: cold-tls {variant}:", " ".join(f"{f[:-3]}={v:.1f}" for f, v in medians.items()), file=sys.stderr)
PY
  exit 0
fi

echo "bench: cold start over TLS: orders-api (warm-up on, off) and Powertools Python, ${BENCH_COLD_RUNS:-20} runs each, through a TLS proxy in front of a fresh DynamoDB Local" >&2
"$target_dir/release/bench" cold-tls "${BENCH_COLD_RUNS:-20}" "$target_dir/release/orders-api" "$2" \
  "$root/.tools/bench-venv/bin/python" scripts/bench/powertools_cold.py >"$out/cold-tls.json"
