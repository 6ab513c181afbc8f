#!/usr/bin/env bash
# `make deploy-check` (part of `make test`): build and deploy as a user does,
# against a local AWS emulator. What runs, and what the emulator cannot do:
# deploy/README.md, "Deploy rehearsal".
#
#  1. `sam build` (release, arm64, rust-cargolambda through cargo-lambda, zig
#     for the cross link) for template.yaml, deploy/valkey.yaml and
#     deploy/postgres.yaml, into one shared cargo target directory
#     (CARGO_TARGET_DIR, or the workspace's): each binary is compiled once and
#     the later templates reuse it (checked: a later build that recompiles a
#     binary fails the check);
#  2. checks each artifact: an aarch64 ELF `bootstrap` needing no glibc newer
#     than provided.al2023's 2.34; reports its size;
#  3. starts moto in server mode on 127.0.0.1, on a free port, for the run
#     (scripts/s3-local.sh: pinned, installed into .tools/s3-venv, stopped by
#     its PID at exit), then scripts/deploy-check/rehearse.py: `sam package`,
#     `sam deploy` of each template, every declared resource read back from
#     the emulator's own service APIs, an update that must keep both tables,
#     a delete that must keep the retained ones;
#  4. prints a summary: each stack's resources with their status, the
#     artifacts' sizes, the time of each phase.
#
#   scripts/deploy-check.sh            # what `make deploy-check` runs
#   DEPLOY_CHECK_KEEP=1 scripts/deploy-check.sh   # keep the work directory
#   DEPLOY_CHECK_BOOTSTRAPS=DIR scripts/deploy-check.sh
#       # also copy template.yaml's checked bootstraps to DIR/<Function>/
#       # (replacing DIR), then DIR/.complete: `make test` hands them to
#       # scripts/sam-local.sh as soon as they are there (while the
#       # deploys run), which then runs what `sam build` made instead of
#       # building again
#   DEPLOY_CHECK_OPT_LEVEL=1 scripts/deploy-check.sh
#       # the release build at that optimisation level instead of the
#       # profile's 3 (CARGO_PROFILE_RELEASE_OPT_LEVEL): `make test` checks
#       # the build, package and deploy path, not the optimiser, and on its
#       # CPU-bound two cores the arm64 release build was the largest job
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

say() { echo "deploy-check: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }

templates=(template.yaml deploy/valkey.yaml deploy/postgres.yaml)

# --- tools ---------------------------------------------------------------------
# shellcheck source=scripts/python-tools.sh
source scripts/python-tools.sh # SAM CLI, cargo-lambda, ziglang (pinned)
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh
# cargo-lambda and SAM's rust-cargolambda builder both honour CARGO_TARGET_DIR
# (without it the builder sets it to `cargo metadata`'s target_directory: the
# same directory). Explicit, so the rest of `make test` shares this build.
export CARGO_TARGET_DIR="$target_dir"
if [ -n "${DEPLOY_CHECK_OPT_LEVEL:-}" ]; then
  export CARGO_PROFILE_RELEASE_OPT_LEVEL="$DEPLOY_CHECK_OPT_LEVEL"
  say "release build at opt-level $DEPLOY_CHECK_OPT_LEVEL (DEPLOY_CHECK_OPT_LEVEL), not the profile's 3: what users deploy is optimised further"
fi
# shellcheck source=scripts/bootstrap-check.sh
source scripts/bootstrap-check.sh

if ! command -v readelf >/dev/null; then
  say "installing binutils (apt) for readelf"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends binutils >&2
fi
if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  say "installing the Rust target aarch64-unknown-linux-gnu (rustup)"
  rustup target add aarch64-unknown-linux-gnu >&2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/deploy-check.XXXXXX")
cleanup() {
  if [ "${DEPLOY_CHECK_KEEP:-}" = 1 ]; then say "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
timings="$work/timings.tsv"
: >"$timings"

# --- 1. sam build, each template -------------------------------------------------
# The linker's output stays in deps/ (cargo-lambda copies it to
# lambda/<bin>/bootstrap on every build, where SAM's builder takes it from):
# its inode and time change only when cargo links the binary again.
deps_dir="$CARGO_TARGET_DIR/aarch64-unknown-linux-gnu/release/deps"
linked() {
  find "$deps_dir" -maxdepth 1 -type f -perm -u+x -name "${1//-/_}-*" -printf '%T@ %i %p\n' 2>/dev/null | sort -n | tail -n 1
}
binaries_of() { grep -A3 'BuildMethod: rust-cargolambda' "$1" | sed -n 's/^ *Binary: *//p' | sort -u; }
declare -A built_at=()
for template in "${templates[@]}"; do
  name=$(basename "$template" .yaml)
  t0=$(date +%s)
  say "sam build --template $template (release, arm64, cargo-lambda; cold, 7 to 13 minutes on 2 cores; seconds once built)"
  # As docs/deploy.md says; only the build directory is this
  # run's own, so three templates do not overwrite one another's build.
  if ! sam build --template "$template" --build-dir "$work/build/$name" >"$work/build-$name.log" 2>&1; then
    tail -n 40 "$work/build-$name.log" >&2
    die "sam build --template $template failed (log above)"
  fi
  t1=$(date +%s)
  printf 'build\t%s\t%s\n' "$template" "$((t1 - t0))" >>"$timings"
  # Built once: a binary an earlier template built must be untouched by this
  # template's build (cargo found it fresh); a new one must be new.
  for bin in $(binaries_of "$template"); do
    m=$(linked "$bin")
    [ -n "$m" ] || die "$template: no $bin in $deps_dir after sam build (did cargo-lambda build elsewhere than CARGO_TARGET_DIR=$CARGO_TARGET_DIR?)"
    if [ -n "${built_at[$bin]:-}" ]; then
      [ "${built_at[$bin]}" = "$m" ] || die "$template: sam build compiled $bin again (already built for an earlier template)"
      say "$template: $bin reused from the earlier build (not linked again)"
    else
      built_at[$bin]=$m
    fi
  done
  say "$template built in $((t1 - t0)) s"
done

# --- 2. the artifacts ------------------------------------------------------------
artifacts="$work/artifacts.tsv"
: >"$artifacts"
for template in "${templates[@]}"; do
  name=$(basename "$template" .yaml)
  found=0
  while IFS= read -r bootstrap; do
    found=$((found + 1))
    fn=$(basename "$(dirname "$bootstrap")")
    machine=$(bootstrap_machine "$bootstrap")
    [ "$machine" = AArch64 ] || die "$template $fn: bootstrap is for $machine, not AArch64 (arm64)"
    class=$(readelf -h -W "$bootstrap" | sed -n 's/^ *Class: *//p')
    [ "$class" = ELF64 ] || die "$template $fn: bootstrap is $class, not ELF64"
    needs=$(bootstrap_glibc "$bootstrap")
    [ -n "$needs" ] || die "$template $fn: no GLIBC version found in its bootstrap (not a dynamically linked glibc binary?)"
    glibc_at_most "$needs" "$provided_al2023_glibc" ||
      die "$template $fn: bootstrap needs GLIBC_$needs, provided.al2023 has $provided_al2023_glibc"
    size=$(stat -c %s "$bootstrap")
    sum=$(sha256sum "$bootstrap" | cut -c1-16)
    printf '%s\t%s\t%s\t%s\t%s\n' "$template" "$fn" "$size" "$needs" "$sum" >>"$artifacts"
  done < <(find "$work/build/$name" -mindepth 2 -maxdepth 2 -name bootstrap | sort)
  [ "$found" -gt 0 ] || die "$template: sam build produced no bootstrap in $work/build/$name"
done
# The same function is the same binary in every template.
dups=$(cut -f2,5 "$artifacts" | sort -u | cut -f1 | uniq -d)
[ -z "$dups" ] || die "a function's bootstrap differs between templates: $dups"
if [ -n "${DEPLOY_CHECK_BOOTSTRAPS:-}" ]; then
  # Only checked artifacts of this run: the directory is replaced whole.
  rm -rf "$DEPLOY_CHECK_BOOTSTRAPS" && mkdir -p "$DEPLOY_CHECK_BOOTSTRAPS"
  while IFS= read -r bootstrap; do
    fn=$(basename "$(dirname "$bootstrap")")
    mkdir -p "$DEPLOY_CHECK_BOOTSTRAPS/$fn"
    cp "$bootstrap" "$DEPLOY_CHECK_BOOTSTRAPS/$fn/bootstrap"
  done < <(find "$work/build/template" -mindepth 2 -maxdepth 2 -name bootstrap)
  # Written last: `make test` starts `sam local` on these as soon as it is
  # there, while the deploys below run.
  touch "$DEPLOY_CHECK_BOOTSTRAPS/.complete"
  say "template.yaml's bootstraps copied to $DEPLOY_CHECK_BOOTSTRAPS"
fi

# --- 3. deploy against the emulator ----------------------------------------------
t0=$(date +%s)
DEPLOY_CHECK_WORK="$work" DEPLOY_CHECK_TIMINGS="$timings" DEPLOY_CHECK_ARTIFACTS="$artifacts" \
  scripts/s3-local.sh python scripts/deploy-check/rehearse.py "${templates[@]}"
say "rehearsal in $(($(date +%s) - t0)) s; whole check in $(($(date +%s) - started)) s"
