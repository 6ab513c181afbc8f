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
# shellcheck source=scripts/common.sh
source "$root/scripts/common.sh"
venv="$root/.tools/s3-venv"
pinned_venv s3-local "$venv" "$root/scripts/s3-local.txt"

port=$(free_port)
log="$root/.tools/s3-local-$port.log"
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
s3_pid=$!
trap 'kill $s3_pid 2>/dev/null || true; wait $s3_pid 2>/dev/null || true' EXIT

wait_listening s3-local "$port" "$s3_pid" "$log" 150 0.2
echo "s3-local: moto listening on 127.0.0.1:$port (pid $s3_pid)" >&2

export AWS_ENDPOINT_URL_S3="http://127.0.0.1:$port"
# The server's own log (scripts/deploy-check reads what moto says it skipped).
export S3_LOCAL_LOG="$log"
export_local_aws
"$@"
