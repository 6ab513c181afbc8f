#!/usr/bin/env bash
# The project's test command (`make test`): every test against DynamoDB Local,
# then the lints. Does all set-up itself on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/dynamodb-local.sh cargo test --workspace --all-targets
cargo test --workspace --doc
cargo clippy --workspace --all-targets -- -D warnings
cargo fmt --all --check
echo "make test: all green"
