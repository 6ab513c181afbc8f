#!/usr/bin/env bash
# The integration suite (tests/tests/it) in shards, each on a DynamoDB Local
# of its own; run inside the other engines' harnesses (make test does:
# scripts/s3-local.sh scripts/redis-local.sh scripts/postgres-local.sh
# scripts/it-shards.sh).
#
# Why: DynamoDB Local slows every write to a stream-enabled table created
# after other stream tables have taken writes, in proportion to those writes
# (BENCHMARKS.md, "A fresh DynamoDB Local per pass"), and nearly every test
# makes a stream table of its own. On one engine the suite took 677 s on two
# cores; in four shards on fresh engines, 238 s. Slow engines also hide
# timing bugs: a wait that gave up early passed only because each poll was
# slow.
#
#   IT_SHARDS (default 6) how many shards, the tests dealt round-robin
set -euo pipefail
cd "$(dirname "$0")/.."

shards="${IT_SHARDS:-6}"
list=$(mktemp -d)
trap 'rm -rf "$list"' EXIT
cargo test -p integration-tests --test it --no-run
cargo test -q -p integration-tests --test it -- --list --format terse 2>/dev/null \
  | sed -n 's/: test$//p' >"$list/all"
total=$(wc -l <"$list/all")
if [ "$total" -eq 0 ]; then
  echo "it-shards: the integration suite listed no tests" >&2
  exit 1
fi
awk -v n="$shards" -v dir="$list" '{ print > (dir "/shard." (NR % n)) }' "$list/all"
failed=()
for f in "$list"/shard.*; do
  name=$(basename "$f")
  echo "it-shards: $name, $(wc -l <"$f") of $total tests, on a fresh DynamoDB Local" >&2
  # shellcheck disable=SC2046 # one test name per word, as libtest takes them
  scripts/dynamodb-local.sh cargo test -p integration-tests --test it -- --exact $(cat "$f") || failed+=("$name")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "it-shards: failed: ${failed[*]} (each shard's failures are listed above it)" >&2
  exit 1
fi
echo "it-shards: all $total tests passed in $shards shards" >&2
