#!/usr/bin/env bash
# The two published crates, lambda-idempotency and lambda-idempotency-cli, as
# crates.io would take them (part of `make test`):
#
#  1. `cargo publish --dry-run` of both (the CLI depends on the library by
#     version, resolved against the packaged library);
#  2. both archives unpacked into a workspace of their own (this Cargo.lock,
#     the library patched in for the CLI) and built from there, so a file
#     left out of a package fails here: the library's documentation as
#     docs.rs builds it (all features, `--cfg docsrs`, every intra-doc link
#     resolved, warnings denied; a feature-gated item must carry its feature's
#     badge), then `cargo check` of both with every feature.
#
# Type-checked rather than compiled (cargo's own verification compiles each
# crate alone, two more builds of the AWS SDK); the test builds compiled this
# code already.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh

say() { echo "publish-check: $*" >&2; }

cargo publish --dry-run --no-verify --allow-dirty -p lambda-idempotency -p lambda-idempotency-cli
version() {
  cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == sys.argv[1]))' "$1"
}
lib="lambda-idempotency-$(version lambda-idempotency)"
cli="lambda-idempotency-cli-$(version lambda-idempotency-cli)"

work=$(mktemp -d "${TMPDIR:-/tmp}/publish-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
for crate in "$lib" "$cli"; do
  # Where the dry run leaves it (target/package/tmp-crate in cargo 1.95).
  archive=$(find "$target_dir/package" -name "$crate.crate" -newer Cargo.toml -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2)
  [ -n "$archive" ] || { say "no $crate.crate under $target_dir/package after the dry run"; exit 1; }
  tar -xzf "$archive" -C "$work"
done
cat >"$work/Cargo.toml" <<TOML
[workspace]
resolver = "2"
members = ["$lib", "$cli"]

[patch.crates-io]
lambda-idempotency = { path = "$lib" }
TOML
cp Cargo.lock "$work/Cargo.lock"

cd "$work"
export CARGO_TARGET_DIR="$target_dir/publish-check"
# Nightly rustdoc features as docs.rs uses them, on this stable toolchain
# (set for the check as well: build scripts that look for a nightly compiler
# then see the same one, and the two commands share every dependency).
export RUSTC_BOOTSTRAP=1
RUSTDOCFLAGS="--cfg docsrs -D warnings" cargo doc --workspace --all-features --no-deps
docs="$target_dir/publish-check/doc/lambda_idempotency"
# One item each behind a feature: its page names the feature.
for page in store/redis/struct.RedisStore.html store/postgres/struct.PostgresStore.html; do
  grep -q 'Available on <strong>crate feature' "$docs/$page" \
    || { say "$page shows no feature badge (docs.rs metadata: all-features, --cfg docsrs)"; exit 1; }
done
cargo check --workspace --all-features
say "both crates package, and build from their archives; the library's docs as docs.rs makes them"
rm -rf "$target_dir/publish-check"
cd "$root"
