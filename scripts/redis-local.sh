#!/usr/bin/env bash
# Run a command with a Redis server listening on a free port, then stop it.
# Installs Debian's `redis-server` (and `openssl`) with apt when missing. The
# server runs as the current user in a temporary directory, without
# persistence, with a plain port and a TLS port (a self-signed certificate
# made here).
#
#   scripts/redis-local.sh <command> [args...]
#
# The command sees IDEMPOTENCY_TEST_REDIS_URL (redis://) and
# IDEMPOTENCY_TEST_REDIS_TLS_URL (rediss://, same server) pointing at it.
set -euo pipefail

if ! command -v redis-server >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
  echo "redis-local: installing redis-server and openssl (apt)" >&2
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq redis-server openssl >&2
fi

dir=$(mktemp -d -t redis-local.XXXXXX)
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=$(free_port)
tls_port=$(free_port)
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
  --tls-port "$tls_port" --tls-cert-file "$dir/cert.pem" --tls-key-file "$dir/key.pem" \
  --tls-ca-cert-file "$dir/cert.pem" --tls-auth-clients no \
  --daemonize no --logfile "$dir/redis.log" &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null || true; wait $redis_pid 2>/dev/null || true; rm -rf "$dir"' EXIT

for _ in $(seq 1 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  kill -0 $redis_pid 2>/dev/null || { echo "redis-local: failed to start:" >&2; cat "$dir/redis.log" >&2; exit 1; }
  sleep 0.1
done
echo "redis-local: listening on 127.0.0.1:$port, TLS on $tls_port (pid $redis_pid)" >&2

export IDEMPOTENCY_TEST_REDIS_URL="redis://127.0.0.1:$port"
# The certificate is self-signed: the URL's `#insecure` skips its check
# (a test shows that without it the certificate is refused).
export IDEMPOTENCY_TEST_REDIS_TLS_URL="rediss://127.0.0.1:$tls_port/#insecure"
"$@"
