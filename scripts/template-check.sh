#!/usr/bin/env bash
# The new-project template (template/, docs/new-project.md), as a user gets
# it: generates a project with `cargo generate --path` from a local git
# repository holding this checkout's files (committed or not: what a clone
# of it would give), and the same with `sam init --location` (cookiecutter),
# checks the two are the same files, for each way the project can take the
# library (a path, a git address, a crates.io version); then runs the
# project's own `make test` (its tests against DynamoDB Local, clippy,
# rustfmt) and `sam validate --lint` on its template.yaml. The project takes
# the library by the template's default, a checkout beside it
# (../lambda-idempotency/shared), and builds in this workspace's target
# directory with this workspace's Cargo.lock, so most dependencies are
# already built.
#
# Installs cargo-generate (pinned, without its git support: `--path` from a
# clone is one of the two ways docs/new-project.md gives, and the git
# support (gix, reqwest) was 240 of its 453 crates; a debug build: it runs
# for a second here, and optimising it costs minutes) into the git-ignored
# .tools/ when missing.
#
#   scripts/template-check.sh                 # the check
#   scripts/template-check.sh --install-only  # cargo-generate only (make test
#                                             # builds it while the tests run)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# shellcheck source=scripts/python-tools.sh
source scripts/python-tools.sh
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh

CARGO_GENERATE_VERSION=0.26.0
cargo_generate="$root/.tools/cargo-generate/bin/cargo-generate"
stamp="$root/.tools/cargo-generate/.installed-$CARGO_GENERATE_VERSION"
if [ ! -f "$stamp" ]; then
  echo "template-check: installing cargo-generate $CARGO_GENERATE_VERSION into .tools/cargo-generate (cargo install)" >&2
  build=$(mktemp -d)
  # Its published lock file names two crates in releases that need a newer
  # Rust than the workspace's 1.95; the releases before them build the same
  # code. So: its source through cargo (crates.io), those two held back,
  # then `cargo install --locked` of that source.
  mkdir -p "$build/fetch/src"
  cat >"$build/fetch/Cargo.toml" <<TOML
[package]
name = "fetch-cargo-generate"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
cargo-generate = { version = "=$CARGO_GENERATE_VERSION", default-features = false }

[workspace]
TOML
  touch "$build/fetch/src/lib.rs"
  source_dir=$(cd "$build/fetch" && cargo metadata --format-version 1 | python3 -c '
import json, os, sys
for package in json.load(sys.stdin)["packages"]:
    if package["name"] == "cargo-generate":
        print(os.path.dirname(package["manifest_path"]))')
  cp -r "$source_dir" "$build/cargo-generate"
  (
    cd "$build/cargo-generate"
    cargo update --quiet -p cargo-util-schemas --precise 0.14.0
    cargo update --quiet -p kstring --precise 2.0.2
    # Not this workspace's lints (make test lints through clippy-driver).
    RUSTC_WORKSPACE_WRAPPER='' CARGO_PROFILE_DEV_DEBUG=false CARGO_TARGET_DIR="$build/target" \
      cargo install --quiet --locked --debug --no-default-features --features new-ui \
      --path . --root "$root/.tools/cargo-generate"
  )
  rm -rf "$build"
  touch "$stamp"
fi
[ "${1:-}" != --install-only ] || exit 0

# No Cargo.toml under template/: cargo reads every one in the repository of
# a git dependency, and an unrendered one is an error shown to its users.
manifests=$(find template -name Cargo.toml)
[ -z "$manifests" ] || { echo "template-check: rename $manifests ({{cookiecutter._cargo_manifest}})" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
name=idempotency-template-check

# A git repository of this checkout's tracked files as they are now, as a
# clone would have them, beside the projects: the template's default
# library_source, ../lambda-idempotency/shared, is its shared/ folder.
repo="$work/lambda-idempotency"
mkdir -p "$repo"
git ls-files -z | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$repo"
git -C "$repo" init -q
git -C "$repo" add -A
git -C "$repo" -c user.name=template-check -c user.email=template-check@localhost commit -q -m "this checkout"

# generate DIR [SOURCE]: the project with each tool into DIR/cargo-generate
# and DIR/sam-init (cargo-generate wants a user), compared.
generate() {
  local dir=$1 defines=() context="{\"project_name\": \"$name\"}"
  if [ $# -gt 1 ]; then
    defines=(--define "library_source=$2")
    context="{\"project_name\": \"$name\", \"library_source\": \"$2\"}"
  fi
  mkdir -p "$dir/cargo-generate" "$dir/sam-init"
  (cd "$dir/cargo-generate" && USER=${USER:-$(id -un)} "$cargo_generate" generate \
    --path "$repo" template --name "$name" --silent --vcs none "${defines[@]}" >&2)
  sam init --location "$repo/template" --no-input --output-dir "$dir/sam-init" \
    --extra-context "$context" >&2
  diff -r "$dir/cargo-generate/$name" "$dir/sam-init/$name" || {
    echo "template-check: cargo generate and sam init made different projects (cargo generate" \
      "also runs rustfmt on its output: the template's Rust files must be rustfmt-clean)" >&2
    exit 1
  }
}
# dependency MANIFEST KEY VALUE: the library's entry takes it by KEY = VALUE.
dependency() {
  python3 - "$@" <<'PY'
import sys, tomllib
manifest, key, value = sys.argv[1:]
with open(manifest, "rb") as f:
    package = tomllib.load(f)
dependency = package["dependencies"]["lambda-idempotency"]
assert package["package"]["name"] == "idempotency-template-check", package["package"]
assert dependency.get(key) == value, (key, value, dependency)
assert not {"path", "git", "version"} - {key} & dependency.keys(), dependency
assert dependency["features"] == ["sweeper", "sweep-via-stream", "aws"], dependency
PY
}

# 1. The default: a checkout beside the project. This is the project tested.
generate "$work"
project="$work/cargo-generate/$name"
mv "$project" "$work/$name" && project="$work/$name"
dependency "$project/Cargo.toml" path ../lambda-idempotency/shared
# 2. The other ways in: a git address (cargo must find the crate in that
# repository by its name), a crates.io version, an absolute path.
generate "$work/git" "file://$repo"
dependency "$work/git/sam-init/$name/Cargo.toml" git "file://$repo"
cp Cargo.lock "$work/git/sam-init/$name/Cargo.lock"
(cd "$work/git/sam-init/$name" && cargo metadata --format-version 1 >/dev/null) || {
  echo "template-check: cargo did not find lambda-idempotency in the git repository file://$repo" >&2
  exit 1
}
generate "$work/version" 0.1
dependency "$work/version/sam-init/$name/Cargo.toml" version 0.1
generate "$work/path" "$root/shared"
dependency "$work/path/sam-init/$name/Cargo.toml" path "$root/shared"

# 3. The project's own tests, lints and template. Java and DynamoDB Local
# are set up (and shared with this checkout) by the repository's script.
scripts/dynamodb-local.sh true
cp Cargo.lock "$project/Cargo.lock"
(
  cd "$project"
  CARGO_TARGET_DIR="$target_dir" DYNAMODB_LOCAL_DIR="$root/.tools/dynamodb-local" make test
  AWS_DEFAULT_REGION=us-east-1 sam validate --lint
)
echo "template-check: cargo generate --path and sam init agree for a path, a git address and a version; the project's make test and sam validate --lint pass" >&2
