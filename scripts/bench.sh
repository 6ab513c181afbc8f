#!/usr/bin/env bash
# `make bench`: performance against the goals of the benchmarks issue, side by
# side with Powertools for AWS Lambda (Python), each measured pass on a fresh
# DynamoDB Local of its own, and the store engines side by side (DynamoDB Local, Redis,
# Redis Cluster, PostgreSQL direct and through PgBouncer: scripts/bench-engines.sh).
# Writes BENCHMARKS.md and docs/benchmarks.svg (bench/ in the target directory
# keeps the raw JSON) and prints the goals and latency tables. Release builds
# only.
#
#   BENCH_ITERATIONS (default 2000) samples per kind per round
#   BENCH_ROUNDS     (default 3) rounds; the report takes medians over rounds
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# shellcheck source=scripts/bench-out.sh
source scripts/bench-out.sh
mkdir -p docs

# The like-for-like cold starts, inside one fresh engine: the benchmark's
# handler in the middleware (`bench serve`, which warms the engine with a
# warm process first), then Powertools' on a table laid out as its default
# (no stream, so the writes before do not slow it).
#   "$0" --cold PYTHON BENCH OUT_DIR
if [ "${1:-}" = "--cold" ]; then
  "$3" cold-same 10 >"$4/cold-same.json"
  export POWERTOOLS_TABLE="powertools-cold-$$"
  "$2" - <<'PY'
import os, boto3
t = os.environ["POWERTOOLS_TABLE"]
c = boto3.client("dynamodb")
c.create_table(TableName=t, AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
               KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}], BillingMode="PAY_PER_REQUEST")
PY
  exec "$3" cold-command 10 "$2" scripts/bench/powertools_cold.py >"$4/powertools-cold.json"
fi

# One measured latency pass inside its fresh engine, then the engine probe
# on that engine: the Rust client's bare PutItem on a new plain table, the
# same measurement after either tool's pass, so the report can tell whether
# the two tools met engines of one speed.
#   "$0" --pass rust|powertools ROUND PYTHON BENCH N OUT_DIR
if [ "${1:-}" = "--pass" ]; then
  case "$2" in
    rust) "$5" latency "$6" 1 >"$7/rust-latency-$3.json" ;;
    powertools) "$4" scripts/bench/powertools.py --iterations "$6" --rounds 1 --out "$7/powertools-$3.json" ;;
    *) echo "bench: --pass $2: use rust or powertools" >&2; exit 2 ;;
  esac
  exec "$5" engine-probe 500 >"$7/probe-$2-$3.json"
fi

if [ "${1:-}" != "--inside" ]; then
  # shellcheck source=scripts/bench-venv.sh
  source scripts/bench-venv.sh
  command -v valgrind >/dev/null || { echo "bench: installing valgrind (apt)" >&2; apt-get install -y -qq valgrind >&2 || true; }
  echo "bench: release build" >&2
  # orders-api alone, as `sam build` builds it (no feature unification with the
  # test crate), so cold start and RSS are the deployed binary's.
  cargo build --release --quiet -p orders-api --bin orders-api
  cargo build --release --quiet -p tools --bin bench
  echo "bench: micro benchmarks (divan)" >&2
  cargo bench --quiet -p integration-tests --bench micro 2>"$out/micro.err" | tee "$out/micro.txt"
  # CPU before DynamoDB Local starts: the in-memory store needs no engine,
  # and a JVM that has just served the latency rounds (garbage collection,
  # JIT threads) would compete for the two cores during the timing.
  echo "bench: library CPU per request (thread CPU time, in-memory store)" >&2
  "$target_dir/release/bench" cpu 20000 >"$out/cpu.json"
  instructions() {
    # Instructions of N requests minus those of N/2: the per-request cost
    # without start-up. callgrind counts are repeatable, unlike time.
    local kind=$1 total=()
    for n in 2000 4000; do
      valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.$kind.$n" "$target_dir/release/bench" cpu-probe "$kind" "$n" >/dev/null 2>"$out/callgrind.$kind.$n.log"
      total+=("$(grep -E '^summary:|^totals:' "$out/callgrind.$kind.$n" | head -n 1 | awk '{print $2}')")
    done
    echo $(( (total[1] - total[0]) / 2000 ))
  }
  sha256() {
    # SHA-256's share of the same difference: callgrind's inclusive cost of
    # sha2's block function (everything it hashes goes through it), from
    # the files instructions() left. The bare handler hashes nothing.
    local kind=$1 total=()
    for n in 2000 4000; do
      total+=("$(callgrind_annotate --inclusive=yes --threshold=100 "$out/callgrind.$kind.$n" \
        | awk '/sha2::sha256::compress256/ { gsub(",", "", $1); print $1; found = 1; exit } END { if (!found) print 0 }')")
    done
    echo $(( (total[1] - total[0]) / 2000 ))
  }
  if command -v valgrind >/dev/null; then
    echo "bench: instructions per request (callgrind; library = wrapped - bare handler)" >&2
    bare=$(instructions bare)
    first=$(( $(instructions first) - bare ))
    replay=$(( $(instructions replay) - bare ))
    cached=$(( $(instructions cached) - bare ))
    printf '{"first_instructions": %s, "replay_instructions": %s, "cached_replay_instructions": %s, "bare_handler_instructions": %s, "first_sha256_instructions": %s, "replay_sha256_instructions": %s, "cached_replay_sha256_instructions": %s}\n' \
      "$first" "$replay" "$cached" "$bare" "$(sha256 first)" "$(sha256 replay)" "$(sha256 cached)" >"$out/instructions.json"
  else
    echo '{}' >"$out/instructions.json"
  fi
  exec scripts/redis-local.sh scripts/postgres-local.sh "$0" --inside
fi



py="$root/.tools/bench-venv/bin/python"
bench="$target_dir/release/bench"
n="${BENCH_ITERATIONS:-2000}"
r="${BENCH_ROUNDS:-3}"

# Both tools send the very same 1,000-byte body, scripts/bench/body.json
# (compiled into the Rust driver and the micro benchmarks, read by pt_common.py).
# Two shared cores: the load average goes into the report as a noise marker.
cut -d' ' -f1 /proc/loadavg >"$out/load-start"
# Every measured pass gets a DynamoDB Local of its own, started here and
# stopped after it: the engine slows every write to a stream-enabled table
# created after other stream tables took writes (BENCHMARKS.md, "Reading the
# results"), so a pass on an engine that served the passes before it would
# be measured on a slower engine than the pass beside it. Each pass warms
# its own engine (and the JIT) before it times anything.
fresh_engine() { scripts/dynamodb-local.sh "$@"; }
for i in $(seq 1 "$r"); do
  echo "bench: latency round $i/$r: lambda-idempotency, then Powertools Python ($n samples per kind), each on a fresh DynamoDB Local" >&2
  fresh_engine "$0" --pass rust "$i" "$py" "$bench" "$n" "$out"
  fresh_engine "$0" --pass powertools "$i" "$py" "$bench" "$n" "$out"
done
"$py" - "$out" "$r" <<'PY'
import json, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])
for prefix, merged in (("rust-latency", "rust-latency.json"), ("powertools", "powertools.json")):
    parts = [json.load(open(os.path.join(out, f"{prefix}-{i}.json"))) for i in range(1, rounds + 1)]
    result = parts[0]
    result["rounds"] = rounds
    result["rounds_data"] = [rd for p in parts for rd in p["rounds_data"]]
    if prefix == "rust-latency":
        # The engine probe after each tool's pass, round by round.
        probe = lambda tool, i: json.load(open(os.path.join(out, f"probe-{tool}-{i}.json")))["bare_us"]
        result["engine_probe"] = [
            {"rust_engine_bare_us": probe("rust", i), "powertools_engine_bare_us": probe("powertools", i)}
            for i in range(1, rounds + 1)
        ]
    json.dump(result, open(os.path.join(out, merged), "w"))
PY
echo "bench: cold start of orders-api through the Runtime API (10 runs, fresh DynamoDB Local)" >&2
fresh_engine "$bench" cold 10 "$target_dir/release/orders-api" >"$out/cold.json"
echo "bench: cold start of the benchmark's handler, then Powertools Python's import + setup + first invocation (10 runs each, one fresh DynamoDB Local)" >&2
fresh_engine "$0" --cold "$py" "$bench" "$out"
# The first request after a cold start over TLS, both tools (its own fresh
# DynamoDB Local and TLS proxy; the goal's figures).
"$root/scripts/bench-cold-tls.sh" --no-build
echo "bench: duplicate storm on orders-api (10,000 requests, 1,000 keys, 10 racing duplicates each, concurrency 32, 4 processes)" >&2
fresh_engine "$bench" storm "$target_dir/release/orders-api" 10000 1000 32 4 >"$out/storm.json"

"$py" - "$out" <<'PY'
import json, os, platform, subprocess, sys
out = sys.argv[1]
load = lambda name: json.load(open(os.path.join(out, name)))
rust = load("rust-latency.json")
cpu, ins, cold, same, ptcold, storm, cold_tls = (load(n) for n in ("cpu.json", "instructions.json", "cold.json", "cold-same.json", "powertools-cold.json", "storm.json", "cold-tls.json"))
rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
cores = os.cpu_count()
load_start = open(os.path.join(out, "load-start")).read().strip()
load_end = open("/proc/loadavg").read().split()[0]
rust.update({
    "versions": {"rustc": rustc},
    "cpu": {**cpu, **ins},
    "cold_start_ms": cold["cold_start_ms"],
    "powertools_cold_start_ms": ptcold["cold_start_ms"],
    "cold": cold,
    "cold_same": same,
    "powertools_cold": ptcold,
    "cold_tls": cold_tls,
    "peak_rss_kb": storm.get("peak_rss_kb"),
    "storm": storm,
    "machine": f"{platform.machine()}, {cores} cores, {platform.system()} {platform.release()}; "
               f"DynamoDB Local (in-memory) on loopback, a fresh one per measured pass; 1-minute load average {load_start} at the start, "
               f"{load_end} at the end (the cores are shared: expect noise)",
    "command": "make bench",
})
json.dump(rust, open(os.path.join(out, "rust.json"), "w"))
PY
# The capacity figures first (the goals table reads them); their section is
# written again after report.py, which rewrites the file without it.
"$root/scripts/bench-capacity.sh"
comparable=0
"$py" scripts/bench/report.py --rust "$out/rust.json" --powertools "$out/powertools.json" \
  --micro "$out/micro.txt" --capacity "$out/capacity.json" --notes scripts/bench/NOTES.md \
  --out-md BENCHMARKS.md --out-svg docs/benchmarks.svg || comparable=$?
"$py" scripts/bench/capacity_report.py --capacity "$out/capacity.json" --md BENCHMARKS.md
# Log bytes per invocation, both tools, and the cut-over window's cost
# (their own sections, also after report.py).
"$root/scripts/bench-logs.sh"
"$root/scripts/bench-cutover.sh"
# The engines section, after it (Redis and PostgreSQL are this script's harnesses).
fresh_engine "$root/scripts/bench-engines.sh" --inside
echo "bench: wrote BENCHMARKS.md and docs/benchmarks.svg" >&2
if [ "$comparable" -ne 0 ]; then
  echo "bench: the run is not comparable (see the sanity row of BENCHMARKS.md's goals table); exit $comparable" >&2
  exit "$comparable"
fi
