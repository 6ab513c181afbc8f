# shellcheck shell=bash
# Sourced by the scripts: sets `target_dir` to cargo's target directory for
# this workspace, which honours CARGO_TARGET_DIR and .cargo/config (binaries
# are never looked up under a literal `target/`).
target_dir=$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
export target_dir
