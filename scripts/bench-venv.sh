# shellcheck shell=bash
# Sourced by the benchmark scripts: installs Powertools for AWS Lambda
# (Python), boto3 and matplotlib, pinned in scripts/bench/requirements.txt,
# into .tools/bench-venv once per version of that file, and sets `bench_python`.
bench_venv="$(pwd)/.tools/bench-venv"
bench_stamp="$bench_venv/.installed-$(sha256sum scripts/bench/requirements.txt | cut -c1-16)"
if [ ! -f "$bench_stamp" ]; then
  echo "bench: installing Powertools for AWS Lambda (Python) and matplotlib into .tools/bench-venv" >&2
  python3 -m venv "$bench_venv"
  "$bench_venv/bin/pip" install --quiet --disable-pip-version-check -r scripts/bench/requirements.txt
  touch "$bench_stamp"
fi
bench_python="$bench_venv/bin/python"
export bench_python
