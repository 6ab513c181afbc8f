#!/usr/bin/env bash
# The two published crates, lambda-idempotency and lambda-idempotency-cli, as
# crates.io would take them (part of `make test`):
#
#  1. `cargo publish --dry-run` of both (the CLI depends on the library by
#     version, resolved against the packaged library). With
#     PUBLISH_CHECK_VERIFY=1 (`make publish-check`), cargo's own
#     verification too: each crate built alone from its archive, with its
#     own manifest's features and nothing unified with the workspace, so a
#     feature a crate uses but does not ask for fails here. That build
#     shares no dependency with the test build (10 min of CPU on this
#     machine), so `make test` skips it and relies on step 2 and on the
#     event-only clippy build of the library;
#  2. both archives unpacked into a workspace of their own (this Cargo.lock,
#     the library patched in for the CLI) and built from there, so a file
#     left out of a package fails here: both crates compiled (cargo's own
#     verification, done here instead, so that the build shares every
#     dependency with the test build: the workspace also holds a copy of
#     functions/workspace-hack), then the library's documentation as docs.rs
#     builds it (all features, `--cfg docsrs`, every intra-doc link
#     resolved, warnings denied), where a feature-gated item must carry its
#     feature's badge.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh

say() { echo "publish-check: $*" >&2; }

verify=--no-verify
case "${PUBLISH_CHECK_VERIFY:-0}" in
  1) verify= ;;
  0) ;;
  *) say "PUBLISH_CHECK_VERIFY=${PUBLISH_CHECK_VERIFY}: use 1 (cargo's verification, each crate built alone) or 0"; exit 2 ;;
esac
# shellcheck disable=SC2086 # empty when verifying
cargo publish --dry-run $verify --allow-dirty -p lambda-idempotency -p lambda-idempotency-cli
[ -n "$verify" ] || say "each crate built alone from its archive (cargo's verification)"
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
mkdir -p "$work/workspace-hack"
cp functions/workspace-hack/lib.rs "$work/workspace-hack/"
sed -e "s|^lambda-idempotency = { path = \"[^\"]*\"|lambda-idempotency = { path = \"../$lib\"|" \
  -e 's/\.workspace = true/ = "2021"/; s/^rust-version = "2021"/rust-version = "1.95"/; s/^license = "2021"/license = "MIT OR Apache-2.0"/' \
  functions/workspace-hack/Cargo.toml >"$work/workspace-hack/Cargo.toml"
cat >"$work/Cargo.toml" <<TOML
[workspace]
resolver = "2"
members = ["$lib", "$cli", "workspace-hack"]

[patch.crates-io]
lambda-idempotency = { path = "$lib" }
TOML
# This workspace's profiles, so that the units are the same.
sed -n '/^\[profile/,$p' Cargo.toml >>"$work/Cargo.toml"
cp Cargo.lock "$work/Cargo.lock"

cd "$work"
# In the test build's target directory. The CLI's binary lands where the
# workspace's own one was (the same code); cargo links that one back on its
# next build.
CARGO_TARGET_DIR="$target_dir" cargo build --workspace 2>&1 | tee "$work/build.log" >&2
# The packaged crates are all it compiled: every dependency came from the
# test build (a dependency compiled here means the copy of workspace-hack no
# longer matches; scripts/workspace-hack.py).
compiled=$(sed -n 's/^ *Compiling \([^ ]*\) .*/\1/p' "$work/build.log" \
  | grep -vxE 'lambda-idempotency|lambda-idempotency-cli|workspace-hack' || true)
[ -z "$compiled" ] || say "NOTE: compiled again for the packaged crates: $(echo "$compiled" | tr '\n' ' ')"
# Nightly rustdoc features as docs.rs uses them, on this stable toolchain:
# for rustdoc alone, so that the dependencies' build scripts (which look for
# a nightly compiler) see the compiler the test build saw, and their units
# stay shared.
printf '#!/bin/sh\nRUSTC_BOOTSTRAP=1 exec rustdoc "$@"\n' >"$work/rustdoc"
chmod +x "$work/rustdoc"
CARGO_TARGET_DIR="$target_dir" RUSTDOC="$work/rustdoc" RUSTDOCFLAGS="--cfg docsrs -D warnings" \
  cargo doc -p lambda-idempotency --all-features --no-deps
docs="$target_dir/doc/lambda_idempotency"
# One item each behind a feature: its page names the feature.
for page in store/redis/struct.RedisStore.html store/postgres/struct.PostgresStore.html; do
  grep -q 'Available on <strong>crate feature' "$docs/$page" \
    || { say "$page shows no feature badge (docs.rs metadata: all-features, --cfg docsrs)"; exit 1; }
done
say "both crates package and build from their archives; the library's docs as docs.rs makes them"
cd "$root"
