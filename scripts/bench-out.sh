# shellcheck shell=bash
# Sourced by the benchmark scripts, from the repository's root: sets
# `target_dir` (scripts/target-dir.sh) and `out`, the folder under it where
# the benchmarks write their JSON (created), which `make bench` reads back.
# shellcheck source=scripts/target-dir.sh
source scripts/target-dir.sh
# shellcheck disable=SC2034 # read by the scripts that source this one
out="$target_dir/bench"
mkdir -p "$out"
