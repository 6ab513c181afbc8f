# shellcheck shell=bash
# Sourced by the scripts that install pinned Python tools or start a local
# server (scripts/*-local.sh, python-tools.sh, bench-venv.sh, demo.sh), so
# each does those steps the same way:
#
#   pinned_venv NAME VENV REQUIREMENTS
#       makes VENV a Python venv holding REQUIREMENTS (pinned), installed
#       again only when that file changes; NAME prefixes what it says
#   free_port
#       prints a free TCP port on 127.0.0.1
#   wait_listening NAME PORT PID LOG TRIES PAUSE
#       waits until something listens on 127.0.0.1:PORT, checking TRIES
#       times PAUSE seconds apart; exits 1, showing LOG, when process PID
#       ended first or nothing listens by then
#   export_local_aws
#       a region and dummy credentials, all the AWS SDK needs to talk to a
#       local server (values already set are kept)

pinned_venv() {
  local name=$1 venv=$2 requirements=$3 stamp
  stamp="$venv/.installed-$(sha256sum "$requirements" | cut -c1-16)"
  [ -f "$stamp" ] && return 0
  echo "$name: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv (pip)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2
  touch "$stamp"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_listening() {
  local name=$1 port=$2 pid=$3 log=$4 tries=$5 pause=$6
  for _ in $(seq 1 "$tries"); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$pid" 2>/dev/null || { echo "$name: failed to start:" >&2; cat "$log" >&2; exit 1; }
    sleep "$pause"
  done
  echo "$name: nothing listens on 127.0.0.1:$port:" >&2
  cat "$log" >&2
  exit 1
}

export_local_aws() {
  export AWS_REGION="${AWS_REGION:-us-east-1}"
  export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-$AWS_REGION}"
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}"
  export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
}
