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
# The tests that fill a stream table with thousands of records run each in a
# shard of its own: on a shared DynamoDB Local they slowed every later test
# of their shard (the 10,000-record sweeper test made its shard take 541 s
# where the others took 30 to 82). The 2,500-record deadline test's first
# page took most of its 60 s on a shard's shared engine, and past it once
# with the release build running beside the tests; alone, seconds.
#
#   IT_SHARDS (default 6) how many shards, the other tests dealt round-robin
#   IT_TEST_THREADS (default 4) tests run at once in a shard. Most of a test's
#             time is spent waiting (on a lease, a TTL, the engine), so two
#             threads on two cores left the CPU 40% idle: one shard took 62 s
#             of wall time for 72 s of CPU. With 4, the suite took 427 s
#             where it took 510 s with 2 (same clone, same machine); the
#             first fresh-clone run at 4 failed on a test helper that used
#             named statements through PgBouncer (fixed since).
#   IT_SKIP   test name prefixes (space-separated) not to run: make test runs
#             the property tests and the fault harness in its reliability step
#
# Built and run with --workspace: the same dependency features, so the same
# build, as `cargo test --workspace` (scripts/workspace-hack.py).
set -euo pipefail
cd "$(dirname "$0")/.."

shards="${IT_SHARDS:-6}"
threads="${IT_TEST_THREADS:-4}"
list=$(mktemp -d)
trap 'rm -rf "$list"' EXIT
cargo test --workspace --test it --no-run
cargo test -q --workspace --test it -- --list --format terse 2>/dev/null \
  | sed -n 's/: test$//p' >"$list/all.listed"
cp "$list/all.listed" "$list/all"
for prefix in ${IT_SKIP:-}; do
  grep -v "^$prefix" "$list/all" >"$list/kept" || true
  mv "$list/kept" "$list/all"
done
total=$(wc -l <"$list/all")
if [ "$total" -eq 0 ]; then
  echo "it-shards: the integration suite listed no tests" >&2
  exit 1
fi
heavy=(
  sweeper::ten_thousand_stuck_records_two_sweepers_completed_ones_untouched
  stream_discovery::resumable_records_are_found_again_by_each_full_pass
  stream_discovery::a_deadline_mid_listing_keeps_the_progress_made
)
for name in "${heavy[@]}"; do
  if ! grep -qxF "$name" "$list/all"; then
    echo "it-shards: $name, to run alone, is not in the suite: rename it here too" >&2
    exit 1
  fi
done
printf '%s\n' "${heavy[@]}" | grep -vxF -f - "$list/all" \
  | awk -v n="$shards" -v dir="$list" '{ print > (dir "/shard." (NR % n)) }'
i=0
for name in "${heavy[@]}"; do
  echo "$name" >"$list/alone.$i"
  i=$((i + 1))
done
failed=()
for f in "$list"/shard.* "$list"/alone.*; do
  name=$(basename "$f")
  echo "it-shards: $name, $(wc -l <"$f") of $total tests, on a fresh DynamoDB Local" >&2
  # shellcheck disable=SC2046 # one test name per word, as libtest takes them
  scripts/dynamodb-local.sh cargo test --workspace --test it -- --test-threads "$threads" --exact $(cat "$f") || failed+=("$name")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "it-shards: failed: ${failed[*]} (each shard's failures are listed above it)" >&2
  exit 1
fi
echo "it-shards: all $total tests passed in $shards shards and ${#heavy[@]} alone${IT_SKIP:+ (not run: $IT_SKIP)}" >&2
