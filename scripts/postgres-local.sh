#!/usr/bin/env bash
# Run a command with a throw-away PostgreSQL server listening on a free port
# of 127.0.0.1, then stop it and delete its data. Installs Debian's server
# packages (apt `postgresql`) when missing.
#
#   scripts/postgres-local.sh <command> [args...]
#
# The command sees IDEMPOTENCY_TEST_POSTGRES_URL, a URL of an empty database
# on that server (user `postgres`, trust authentication on loopback only).
# The server also speaks TLS, with a certificate for `localhost` signed by a
# CA made here (its path in IDEMPOTENCY_TEST_POSTGRES_CA), so tests can check
# each sslmode against a real handshake.
# PostgreSQL refuses to run as root: as root, the server runs as the
# unprivileged user `idem-pg` (created when missing).
#
# PgBouncer (apt `pgbouncer`) runs in front of it in transaction pooling mode,
# the way RDS Proxy pools: IDEMPOTENCY_TEST_POSTGRES_POOLER_URL reaches the same
# database through it, so tests can show the store keeps no session state
# between statements (no named prepared statements, no SET outside a
# transaction).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "$0")/common.sh"

bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

missing=()
if [ -z "$(bin_dir)" ] || [ ! -x "$(bin_dir)/initdb" ]; then missing+=(postgresql); fi
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "postgres-local: installing ${missing[*]} (apt)" >&2
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >&2
fi
pgbouncer_bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
bin=$(bin_dir)
[ -x "$bin/initdb" ] || { echo "postgres-local: initdb not found under /usr/lib/postgresql" >&2; exit 1; }

as_server=()
if [ "$(id -u)" -eq 0 ]; then
  pg_user=idem-pg
  if ! id "$pg_user" >/dev/null 2>&1; then
    echo "postgres-local: creating the unprivileged user $pg_user to run the server" >&2
    useradd --system --no-create-home --shell /usr/sbin/nologin "$pg_user"
  fi
  as_server=(runuser -u "$pg_user" --)
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/postgres-local.XXXXXX")
chmod 755 "$dir"
[ "${#as_server[@]}" -gt 0 ] && chown "$pg_user" "$dir"
data="$dir/data"
log="$dir/server.log"

port=$(free_port)

"${as_server[@]}" "$bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 \
  --locale=C --no-sync >"$dir/initdb.log" 2>&1 ||
  { echo "postgres-local: initdb failed:" >&2; cat "$dir/initdb.log" >&2; exit 1; }

# A CA and a server certificate it signs, for the name `localhost` only (not
# 127.0.0.1), so a test can tell verify-full (host name checked) from
# verify-ca (chain only).
(
  cd "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=idempotency test CA" \
    -keyout ca.key -out ca.crt
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr
  printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n' >server.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile server.ext -out server.crt
) >"$dir/openssl.log" 2>&1 ||
  { echo "postgres-local: making the TLS certificates failed:" >&2; cat "$dir/openssl.log" >&2; exit 1; }
chmod 600 "$dir/server.key"
chmod 644 "$dir/server.crt" "$dir/ca.crt"
[ "${#as_server[@]}" -gt 0 ] && chown "$pg_user" "$dir/server.key" "$dir/server.crt"

stop() {
  if [ -f "$dir/pgbouncer.pid" ]; then kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true; fi
  "${as_server[@]}" "$bin/pg_ctl" -D "$data" stop -m immediate >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT

# A test server: durability off (the data is thrown away), room for every
# test's pool at once.
"${as_server[@]}" "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 start -o \
  "-p $port -c listen_addresses=127.0.0.1 -k $dir -c max_connections=400 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key" \
  >/dev/null ||
  { echo "postgres-local: the server failed to start:" >&2; cat "$log" >&2; exit 1; }

"$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 \
  -c "CREATE DATABASE idempotency_test" >/dev/null
echo "postgres-local: listening on 127.0.0.1:$port (data in $dir)" >&2

# A small server pool (4) shared by every client, so one client's
# consecutive statements meet different server connections.
bouncer_port=$(free_port)
cat >"$dir/pgbouncer.ini" <<INI
[databases]
idempotency_test = host=127.0.0.1 port=$port dbname=idempotency_test user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 500
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
echo '"postgres" ""' >"$dir/userlist.txt"
[ "${#as_server[@]}" -gt 0 ] && chown "$pg_user" "$dir/pgbouncer.ini" "$dir/userlist.txt"
"${as_server[@]}" "$pgbouncer_bin" -d "$dir/pgbouncer.ini" >/dev/null 2>&1 ||
  { echo "postgres-local: PgBouncer failed to start:" >&2; cat "$dir/pgbouncer.log" >&2 2>/dev/null; exit 1; }
for _ in $(seq 1 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$bouncer_port") 2>/dev/null; then break; fi
  sleep 0.1
done
echo "postgres-local: PgBouncer (transaction pooling) on 127.0.0.1:$bouncer_port" >&2

export IDEMPOTENCY_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/idempotency_test?sslmode=disable"
export IDEMPOTENCY_TEST_POSTGRES_CA="$dir/ca.crt"
export IDEMPOTENCY_TEST_POSTGRES_POOLER_URL="postgres://postgres@127.0.0.1:$bouncer_port/idempotency_test?sslmode=disable"
"$@"
