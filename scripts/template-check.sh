#!/usr/bin/env bash
# The new-project template (template/, docs/new-project.md), as a user gets
# it: generates a project with `cargo generate` and another with `sam init
# --location` (cookiecutter) into a temporary folder, checks the two are the
# same files, then runs the generated project's own `make test` (its tests
# against DynamoDB Local, clippy, rustfmt) and `sam validate --lint` on its
# template.yaml. The project depends on this checkout's shared/ and builds
# in this workspace's target directory, with this workspace's Cargo.lock, so
# the dependencies are those already built.
#
# Installs cargo-generate (pinned, without its git support: only local
# templates are generated here) into the git-ignored .tools/ when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# shellcheck source=scripts/python-tools.sh
source scripts/python-tools.sh
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh

CARGO_GENERATE_VERSION=0.26.0
cargo_generate="$root/.tools/cargo-generate/bin/cargo-generate"
if [ ! -f "$root/.tools/cargo-generate/.installed-$CARGO_GENERATE_VERSION" ]; then
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
    CARGO_TARGET_DIR="$build/target" cargo install --quiet --locked --no-default-features \
      --path . --root "$root/.tools/cargo-generate"
  )
  rm -rf "$build"
  touch "$root/.tools/cargo-generate/.installed-$CARGO_GENERATE_VERSION"
fi

# No Cargo.toml under template/: cargo reads every one in the repository of
# a git dependency, and an unrendered one is an error shown to its users.
manifests=$(find template -name Cargo.toml)
[ -z "$manifests" ] || { echo "template-check: rename $manifests ({{cookiecutter._cargo_manifest}})" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/cargo-generate" "$work/sam-init" "$work/default"
name=idempotency-template-check

# 1. The two ways in, from the same files (cargo-generate wants a user).
USER=${USER:-$(id -un)} "$cargo_generate" generate --path template --name "$name" \
  --silent --vcs none --destination "$work/cargo-generate" \
  --define library_path="$root/shared" >&2
sam init --location template --no-input --output-dir "$work/sam-init" \
  --extra-context "{\"project_name\": \"$name\", \"library_path\": \"$root/shared\"}" >&2
diff -r "$work/cargo-generate/$name" "$work/sam-init/$name" \
  || {
    echo "template-check: cargo generate and sam init made different projects (cargo generate" \
      "also runs rustfmt on its output: the template's Rust files must be rustfmt-clean)" >&2
    exit 1
  }
# Without a library path the dependency is the library's git repository.
sam init --location template --no-input --output-dir "$work/default" >&2
python3 - "$work/default/my-idempotent-api/Cargo.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as manifest:
    package = tomllib.load(manifest)
dependency = package["dependencies"]["lambda-idempotency"]
assert package["package"]["name"] == "my-idempotent-api", package["package"]
assert dependency.get("git", "").startswith("https://"), dependency
assert "path" not in dependency, dependency
PY

# 2. The project's own tests, lints and template. Java and DynamoDB Local
# are set up (and shared with this checkout) by the repository's script.
project="$work/cargo-generate/$name"
scripts/dynamodb-local.sh true
cp Cargo.lock "$project/Cargo.lock"
(
  cd "$project"
  CARGO_TARGET_DIR="$target_dir" DYNAMODB_LOCAL_DIR="$root/.tools/dynamodb-local" make test
  AWS_DEFAULT_REGION=us-east-1 sam validate --lint
)
echo "template-check: cargo generate and sam init agree; the project's make test and sam validate --lint pass" >&2
