#!/usr/bin/env bash
# Run a command with a local S3-compatible server (moto in server mode, from
# PyPI, pinned in scripts/s3-local.txt) listening on a free port, then stop it.
# Installs moto into the git-ignored .tools/s3-venv when missing.
#
#   scripts/s3-local.sh <command> [args...]
#
# The command sees AWS_ENDPOINT_URL_S3 pointing at the server, plus dummy
# credentials and a region, which is all the AWS SDK needs (an IP endpoint
# gets path-style addressing from the SDK's endpoint rules). Composes with
# scripts/dynamodb-local.sh: `scripts/dynamodb-local.sh scripts/s3-local.sh cargo test`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.tools/s3-venv"
stamp="$venv/.installed-$(sha256sum "$root/scripts/s3-local.txt" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "s3-local: installing $(grep -v '^#' "$root/scripts/s3-local.txt" | tr '\n' ' ')into .tools/s3-venv (pip)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$root/scripts/s3-local.txt" >&2
  touch "$stamp"
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log="$root/.tools/s3-local-$port.log"
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
s3_pid=$!
trap 'kill $s3_pid 2>/dev/null || true; wait $s3_pid 2>/dev/null || true' EXIT

for _ in $(seq 1 150); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  kill -0 $s3_pid 2>/dev/null || { echo "s3-local: failed to start:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.2
done
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "s3-local: not listening on $port after 30 s:" >&2; cat "$log" >&2; exit 1; }
echo "s3-local: moto listening on 127.0.0.1:$port (pid $s3_pid)" >&2

export AWS_ENDPOINT_URL_S3="http://127.0.0.1:$port"
# The server's own log (scripts/deploy-check reads what moto says it skipped).
export S3_LOCAL_LOG="$log"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-$AWS_REGION}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
"$@"
