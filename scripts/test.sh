#!/usr/bin/env bash
# The project's test command (`make test`): every test against DynamoDB Local
# a local S3 server (moto, for the S3 offload of large responses), a Redis
# server and a PostgreSQL server (all started here, on free ports), then the
# lints. Does all set-up itself on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# No incremental compilation: a run from a clean clone (CI) gains nothing
# from it, and its caches took gigabytes of a disk that once ran out during
# this command. The workspace's own crates also build with line tables only
# (Cargo.toml's [profile.dev]).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The free disk and its size, for the lines below.
disk() { df -h --output=avail,size "$1" | tail -1 | awk '{print $1 " free of " $2}'; }
# Each step's start: seconds since this command began, and the disk left.
step() { echo "make test: [$SECONDS s, $(disk .)] $*" >&2; }
step "start"
stopped() {
  local status=$?
  [ "$status" -eq 0 ] || echo "make test: stopped (exit $status) after $SECONDS s with $(disk .)" >&2
}
trap stopped EXIT

# shellcheck source=scripts/python-tools.sh
source scripts/python-tools.sh
# Powertools for AWS Lambda (Python), pinned in scripts/bench/requirements.txt:
# the cut-over tests read records it writes itself (tests/powertools/).
# shellcheck source=scripts/bench-venv.sh
source scripts/bench-venv.sh
export IDEMPOTENCY_TEST_POWERTOOLS_PYTHON="$bench_python"

step "function binaries"
# Function binaries the tests run as real processes (built alone, as Lambda
# tooling builds them).
cargo build -p orders-api --bin orders-api -p order-events --bin order-events -p sweeper --bin sweeper
# The AWS calls this run's tests record for the IAM check below
# (tests/src/iam_record.rs), none left from an earlier run.
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh
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
# shellcheck disable=SC2086 # `--test NAME` pairs
scripts/dynamodb-local.sh scripts/s3-local.sh scripts/redis-local.sh scripts/postgres-local.sh \
  cargo test --workspace --lib --bins --examples --benches $other_tests
step "the integration suite"
scripts/s3-local.sh scripts/redis-local.sh scripts/postgres-local.sh scripts/it-shards.sh
step "doc tests, lints, docs, package"
cargo test --workspace --doc
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --all-features -- -D warnings
# The library without its HTTP stack, as an event-only function builds it.
cargo clippy -p lambda-idempotency --all-targets --no-default-features \
  --features dynamodb,sqs,kinesis,dynamodb-stream-events -- -D warnings
cargo fmt --all --check
# The documentation, every intra-doc link resolved, and the crate as it would
# be published (its verify build included).
RUSTDOCFLAGS="-D warnings" cargo doc -p lambda-idempotency --all-features --no-deps
cargo package -p lambda-idempotency --allow-dirty --quiet
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
step "the new-project template"
# The new-project template: a project generated with cargo generate (and the
# same with sam init), built here, its own make test and sam validate --lint.
scripts/template-check.sh
# The SAM transform itself, with and without the optional JWT authorizer.
AWS_DEFAULT_REGION=us-east-1 python scripts/check-template.py
# Every AWS call the tests recorded, evaluated against its caller's role in
# the transformed templates (deploy/README.md, "IAM: what each grant is for").
AWS_DEFAULT_REGION=us-east-1 python scripts/check-iam.py
step "deploy rehearsal"
# Build, package and deploy as users do: `sam build` (release, arm64) of the
# three templates, the artifacts checked, `sam package` / `sam deploy` against
# a local moto server, every resource read back (deploy/README.md, "Deploy
# rehearsal"). template.yaml's checked bootstraps are kept for `sam local`.
bootstraps="$target_dir/sam-build-bootstraps"
DEPLOY_CHECK_BOOTSTRAPS="$bootstraps" scripts/deploy-check.sh
step "sam local"
# Every sample event through `sam local invoke` and the HTTP API through
# `sam local start-api` + curl, offline (Docker daemon in a private network
# namespace), running the bootstraps `sam build` just made (arm64, release)
# rather than building the functions again. Where the machine cannot run it
# (no root), it fails and says why, unless SAM_LOCAL_ALLOW_SKIP=1.
SAM_LOCAL_BOOTSTRAPS="$bootstraps" scripts/sam-local.sh
step "reliability"
# Storm, crash and store-fault injection at the reduced size (the full run,
# `make reliability`, writes RELIABILITY.md).
RELIABILITY_SIZE=ci RELIABILITY_OUT="$target_dir/RELIABILITY-ci.md" scripts/reliability.sh
step "demo"
# The README demo, end to end through cargo lambda watch; it fails on any
# answer that breaks the contract.
scripts/demo.sh
echo "make test: all green in $SECONDS s; $(du -sh "$target_dir" | cut -f1) in $target_dir, $(disk "$target_dir")"
