#!/usr/bin/env bash
# Run a command with a Redis server listening on a free port, then stop it.
# Installs Debian's `redis-server` (and `openssl`) with apt when missing. The
# server runs as the current user in a temporary directory, without
# persistence, with a plain port and a TLS port (a self-signed certificate
# made here); beside it, a Redis Cluster of three primaries.
#
#   scripts/redis-local.sh <command> [args...]
#
# The command sees IDEMPOTENCY_TEST_REDIS_URL (redis://),
# IDEMPOTENCY_TEST_REDIS_TLS_URL (rediss://, same server) and
# IDEMPOTENCY_TEST_REDIS_CLUSTER_URL (one node of the cluster).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "$0")/common.sh"

if ! command -v redis-server >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
  echo "redis-local: installing redis-server and openssl (apt)" >&2
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq redis-server openssl >&2
fi

dir=$(mktemp -d -t redis-local.XXXXXX)
port=$(free_port)
tls_port=$(free_port)
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
  --tls-port "$tls_port" --tls-cert-file "$dir/cert.pem" --tls-key-file "$dir/key.pem" \
  --tls-ca-cert-file "$dir/cert.pem" --tls-auth-clients no \
  --daemonize no --logfile "$dir/redis.log" &
pids=($!)
redis_pid=${pids[0]}
stop() {
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$dir"
}
trap stop EXIT

wait_listening redis-local "$port" "$redis_pid" "$dir/redis.log" 100 0.1
echo "redis-local: listening on 127.0.0.1:$port, TLS on $tls_port (pid $redis_pid)" >&2

# The cluster: three primaries, slots split between them by redis-cli.
nodes=()
for i in 1 2 3; do
  node_port=$(free_port)
  mkdir -p "$dir/node-$i"
  redis-server --port "$node_port" --cluster-port "$(free_port)" --bind 127.0.0.1 \
    --cluster-enabled yes --cluster-config-file "$dir/node-$i/nodes.conf" \
    --dir "$dir/node-$i" --save '' --appendonly no --daemonize no \
    --logfile "$dir/node-$i/redis.log" &
  pids+=($!)
  wait_listening redis-local "$node_port" "$!" "$dir/node-$i/redis.log" 100 0.1
  nodes+=("127.0.0.1:$node_port")
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$dir/cluster-create.log" 2>&1 \
  || { echo "redis-local: creating the cluster failed:" >&2; cat "$dir/cluster-create.log" >&2; exit 1; }
first_node_port=${nodes[0]##*:}
for _ in $(seq 1 100); do
  if redis-cli -p "$first_node_port" cluster info | grep -q '^cluster_state:ok'; then break; fi
  sleep 0.1
done
redis-cli -p "$first_node_port" cluster info | grep -q '^cluster_state:ok' \
  || { echo "redis-local: the cluster did not come up" >&2; exit 1; }
echo "redis-local: cluster of ${nodes[*]}" >&2

export IDEMPOTENCY_TEST_REDIS_URL="redis://127.0.0.1:$port"
# The certificate is self-signed: the URL's `#insecure` skips its check
# (a test shows that without it the certificate is refused).
export IDEMPOTENCY_TEST_REDIS_TLS_URL="rediss://127.0.0.1:$tls_port/#insecure"
export IDEMPOTENCY_TEST_REDIS_CLUSTER_URL="redis://${nodes[0]}"
"$@"
