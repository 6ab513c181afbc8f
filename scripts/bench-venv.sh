# shellcheck shell=bash
# Sourced by the benchmark scripts: installs Powertools for AWS Lambda
# (Python), boto3 and matplotlib, pinned in scripts/bench/requirements.txt,
# into .tools/bench-venv once per version of that file, and sets `bench_python`.
# shellcheck source=scripts/common.sh
source scripts/common.sh
bench_venv="$(pwd)/.tools/bench-venv"
pinned_venv bench "$bench_venv" scripts/bench/requirements.txt
bench_python="$bench_venv/bin/python"
export bench_python
