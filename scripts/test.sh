#!/usr/bin/env bash
# The project's test command (`make test`): every test against DynamoDB Local
# a local S3 server (moto, for the S3 offload of large responses), a Redis
# server and a PostgreSQL server (all started here, on free ports), the lints,
# the templates, the deploy rehearsal, `sam local`, reliability and the demo.
# Does all set-up itself on a fresh machine. docs/testing.md gives each
# step's time.
#
# What runs beside what (2 cores): the installs run while the first build
# compiles; the arm64 release build of the deploy rehearsal and the build of
# cargo-generate run, at the lowest CPU priority, while the tests run (which
# leave much of the CPU idle waiting on the engines). Every job's output goes
# to its log in $target_dir/make-test/, shown when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# No incremental compilation: a run from a clean clone (CI) gains nothing
# from it, and its caches took gigabytes of a disk that once ran out during
# this command. The workspace's own crates also build with line tables only
# (Cargo.toml's [profile.dev]).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Clippy lints the workspace's crates while they are compiled for the tests
# (clippy-driver does the compilation too), instead of a check build of the
# whole tree of its own; every debug build below uses it, so each crate is
# compiled once. Dependencies are compiled by rustc as usual.
RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
[ -x "$RUSTC_WORKSPACE_WRAPPER" ] || {
  echo "make test: clippy is missing: rustup component add clippy" >&2
  exit 1
}
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# CLIPPY_ARGS is how cargo-clippy hands its arguments to clippy-driver; were
# that ever to change, the lints would quietly stop failing the build. So a
# crate with one clippy warning must fail to build here.
canary=$(mktemp -d)
mkdir -p "$canary/src"
printf '[package]\nname = "canary"\nversion = "0.0.0"\nedition = "2021"\n[workspace]\n' >"$canary/Cargo.toml"
printf 'pub fn empty(v: &[u8]) -> bool {\n    v.len() == 0\n}\n' >"$canary/src/lib.rs"
if (cd "$canary" && CARGO_TARGET_DIR="$canary/target" cargo build --quiet 2>/dev/null); then
  echo "make test: clippy-driver did not deny a clippy warning (len_zero): CLIPPY_ARGS no longer reaches it" >&2
  exit 1
fi
rm -rf "$canary"
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh
jobs="$target_dir/make-test"
rm -rf "$jobs" && mkdir -p "$jobs"
# The free disk and its size, for the lines below.
disk() { df -h --output=avail,size "$1" | tail -1 | awk '{print $1 " free of " $2}'; }
# Each step's start: seconds since this command began, and the disk left,
# also kept in $jobs/steps.log.
step() { echo "make test: [$SECONDS s, $(disk .)] $*" | tee -a "$jobs/steps.log" >&2; }
step "start"
stopped() {
  local status=$?
  [ "$status" -eq 0 ] || echo "make test: stopped (exit $status) after $SECONDS s with $(disk .)" >&2
  # Jobs still running when a step failed.
  for pid in "${!job_name[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
}
trap stopped EXIT

declare -A job_name=() job_start=()
# job NAME NICE COMMAND...: COMMAND in the background (its own process group,
# at that niceness), output to $jobs/NAME.log.
job() {
  local name=$1 niceness=$2
  shift 2
  # A new session is a new scheduling group where the kernel groups tasks by
  # session (sched_autogroup, on here): a job's own niceness then ranks it
  # only among its own processes, and the group competed with the tests as
  # an equal (the arm64 build took half the CPU from the tests). The group's
  # niceness, set from inside the new session, ranks the job as a whole.
  # shellcheck disable=SC2016 # expanded by the job's own shell
  setsid bash -c 'n=$1; shift; if [ -w /proc/self/autogroup ]; then echo "$n" >/proc/self/autogroup; fi
    exec nice -n "$n" "$@"' job "$niceness" "$@" >"$jobs/$name.log" 2>&1 </dev/null &
  job_name[$!]=$name
  job_start[$!]=$SECONDS
  echo "make test: [$SECONDS s] $name: started in the background (log: $jobs/$name.log)" | tee -a "$jobs/steps.log" >&2
}
# await NAME: waits for the job, shows its log's end if it failed.
await() {
  local pid rc=0
  for pid in "${!job_name[@]}"; do
    [ "${job_name[$pid]}" = "$1" ] || continue
    wait "$pid" || rc=$?
    unset "job_name[$pid]"
    if [ "$rc" -ne 0 ]; then
      tail -n 60 "$jobs/$1.log" >&2
      echo "make test: $1 failed (exit $rc; whole log: $jobs/$1.log)" >&2
      exit "$rc"
    fi
    echo "make test: [$SECONDS s] $1: done in $((SECONDS - job_start[$pid])) s" | tee -a "$jobs/steps.log" >&2
    return 0
  done
  echo "make test: no job $1" >&2
  exit 1
}

# The installs, one after another (apt allows one at a time): the Python tools
# (SAM CLI, cargo-lambda, zig), Powertools for AWS Lambda (Python; the
# cut-over tests read records it writes itself, tests/powertools/), moto,
# Java and DynamoDB Local, Redis, PostgreSQL (each engine started once), and
# what `sam local` needs to run the rehearsal's bootstraps (Docker, qemu,
# the arm64 Rust target).
job installs 0 bash -c 'set -e
  source scripts/python-tools.sh; source scripts/bench-venv.sh; source scripts/powertools-node.sh
  scripts/dynamodb-local.sh scripts/s3-local.sh scripts/redis-local.sh scripts/postgres-local.sh true
  SAM_LOCAL_INSTALL_ONLY=1 SAM_LOCAL_ALLOW_SKIP=1 SAM_LOCAL_BOOTSTRAPS="$target_dir/sam-build-bootstraps" \
    scripts/sam-local.sh'

step "dependency features"
# Every debug build below shares one build of each dependency.
python3 scripts/workspace-hack.py
# Every store call the tests, the demo and the generated project make may
# take 10 s: the engines here are emulators on two busy cores, where a
# DynamoDB Local call can take longer than the 450 ms a store call gets by
# default (docs/DESIGN.md, "Failing fast"). tests/tests/it/fail_fast.rs
# sets the default limits itself.
export IDEMPOTENCY_STORE_TIMEOUT_MS=10000
step "function binaries and test targets"
# Function binaries the tests run as real processes, then every test target.
cargo build -p orders-api --bin orders-api -p order-events --bin order-events -p sweeper --bin sweeper
cargo test --workspace --all-targets --no-run
await installs
# shellcheck source=scripts/python-tools.sh
source scripts/python-tools.sh
# shellcheck source=scripts/bench-venv.sh
source scripts/bench-venv.sh
export IDEMPOTENCY_TEST_POWERTOOLS_PYTHON="$bench_python"
# shellcheck source=scripts/powertools-node.sh
source scripts/powertools-node.sh
export IDEMPOTENCY_TEST_POWERTOOLS_NODE_MODULES="$powertools_node_modules"

# While the tests run: the arm64 release build and the deploy rehearsal, and
# cargo-generate for the new-project check.
bootstraps="$target_dir/sam-build-bootstraps"
# None left from an earlier run: `sam local` below starts once the rehearsal
# has written them (its .complete).
rm -rf "$bootstraps"
# The rehearsal's release build at opt-level 0: it checks the build, package
# and deploy path and runs the bootstraps under `sam local`; the optimiser's
# passes (opt-level 3, what users deploy) cost CPU the tests need, and this
# build was the last job to finish.
job deploy-rehearsal 19 env DEPLOY_CHECK_BOOTSTRAPS="$bootstraps" DEPLOY_CHECK_OPT_LEVEL=0 RUSTC_WORKSPACE_WRAPPER= \
  scripts/deploy-check.sh
job cargo-generate 19 scripts/template-check.sh --install-only

# The AWS calls this run's tests record for the IAM check below
# (tests/src/iam_record.rs), none left from an earlier run.
rm -rf "$target_dir/debug/iam-calls"
# Every target but the integration suite on one set of engines (they make a
# few tables each); the suite itself in shards, each on a fresh DynamoDB
# Local (scripts/it-shards.sh says why).
other_tests=$(cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
for package in json.load(sys.stdin)["packages"]:
    for target in package["targets"]:
        if "test" in target["kind"] and target["name"] != "it":
            print("--test", target["name"])
')
step "every test target but the integration suite"
# `--examples` runs the examples' tests too: shared/examples/custom_store.rs
# runs the store conformance suite on a store of its own (its `test-util`
# feature is on here, through workspace-hack), so a case that fails fails this.
# shellcheck disable=SC2086 # `--test NAME` pairs
scripts/dynamodb-local.sh scripts/s3-local.sh scripts/redis-local.sh scripts/postgres-local.sh \
  cargo test --workspace --lib --bins --examples --benches $other_tests
step "the integration suite"
# The property tests and the fault harness run once, in the reliability step.
IT_SKIP="fuzz:: model:: fault_harness:: stream_chaos:: interleavings::" \
  scripts/s3-local.sh scripts/redis-local.sh scripts/postgres-local.sh scripts/it-shards.sh
step "reliability"
# The property tests, the fault harness, storm, crash and store-fault
# injection at the reduced size (the full run, `make reliability`, writes
# RELIABILITY.md).
# Its deterministic counts (the fault harness's, stream_chaos's) must be the
# committed ones (reliability-counts.json).
RELIABILITY_SIZE=ci RELIABILITY_OUT="$target_dir/RELIABILITY-ci.md" RELIABILITY_CHECK_COUNTS=1 \
  scripts/reliability.sh
step "doc tests, lints, docs, package"
cargo test --workspace --doc
# The library without its HTTP stack, as an event-only function builds it
# (the default and all-features lints ran with the test builds above).
cargo clippy -p lambda-idempotency --all-targets --no-default-features \
  --features dynamodb,sqs,kinesis,events-dynamodb-stream -- -D warnings
cargo fmt --all --check
# The two published crates as crates.io would take them, then built from
# those archives: the library's documentation as docs.rs builds it (every
# intra-doc link resolved) and the CLI against the packaged library
# (scripts/publish-check.sh).
scripts/publish-check.sh
# The minimum Rust version the README and Cargo.toml promise (`rust-version`).
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if rustc --version | grep -q "^rustc ${msrv}[ .]"; then
  echo "this rustc is the minimum version ($msrv): the builds above checked it"
else
  # rustup names it in full (1.95 is toolchain 1.95.0).
  [[ $msrv == *.*.* ]] || msrv="$msrv.0"
  cargo "+$msrv" check -p lambda-idempotency --all-features
fi
step "templates, IAM"
# The SAM template, offline (cfn-lint rules included).
AWS_DEFAULT_REGION=us-east-1 sam validate --lint
# The second templates: the Valkey and PostgreSQL engines (deploy/README.md).
AWS_DEFAULT_REGION=us-east-1 sam validate --lint --template deploy/valkey.yaml
AWS_DEFAULT_REGION=us-east-1 sam validate --lint --template deploy/postgres.yaml
# The SAM transform itself, with and without the optional JWT authorizer.
AWS_DEFAULT_REGION=us-east-1 python scripts/check-template.py
# Every AWS call the tests recorded, evaluated against its caller's role in
# the transformed templates (deploy/README.md, "IAM: what each grant is for").
AWS_DEFAULT_REGION=us-east-1 python scripts/check-iam.py
step "the new-project template"
await cargo-generate
# A project generated with `cargo generate --git` from a local clone (and the
# same with sam init), its own make test and sam validate --lint.
scripts/template-check.sh
step "demo"
# The README demo, end to end through cargo lambda watch; it fails on any
# answer that breaks the contract.
scripts/demo.sh
step "sam local"
# Every sample event through `sam local invoke` and the HTTP API through
# `sam local start-api` + curl, offline (Docker daemon in a private network
# namespace), running the bootstraps `sam build` just made (arm64, release)
# rather than building the functions again. Where the machine cannot run it
# (no root), it fails and says why, unless SAM_LOCAL_ALLOW_SKIP=1. It starts
# as soon as the rehearsal below has checked and copied template.yaml's
# bootstraps, while that rehearsal's deploys run (they wait on the emulator
# more than they compute).
until [ -f "$bootstraps/.complete" ]; do
  running=0
  for pid in "${!job_name[@]}"; do
    [ "${job_name[$pid]}" = deploy-rehearsal ] && kill -0 "$pid" 2>/dev/null && running=1
  done
  if [ "$running" = 0 ]; then
    # It ended without them: its failure is shown here, or it is an error.
    await deploy-rehearsal
    echo "make test: the deploy rehearsal ended without writing $bootstraps/.complete" >&2
    exit 1
  fi
  sleep 5
done
SAM_LOCAL_BOOTSTRAPS="$bootstraps" scripts/sam-local.sh
step "deploy rehearsal"
# Build, package and deploy as users do: `sam build` (release, arm64) of the
# three templates, the artifacts checked, `sam package` / `sam deploy` against
# a local moto server, every resource read back (deploy/README.md, "Deploy
# rehearsal"). template.yaml's checked bootstraps are the ones `sam local`
# ran above.
await deploy-rehearsal
step "all green in $SECONDS s; $(du -sh "$target_dir" | cut -f1) in $target_dir (steps: $jobs/steps.log)"
