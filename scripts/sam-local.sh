#!/usr/bin/env bash
# `make sam-local`: every sample event in events/ through SAM CLI's own local
# runtime (`sam local invoke`), and the HTTP API through `sam local start-api`
# and curl, offline, on this machine; part of `make test`.
#
# What it does, in order:
#  1. checks that this machine can run a Docker daemon (root, namespaces,
#     cgroups); if not it says why and what to do, and fails, unless
#     SAM_LOCAL_ALLOW_SKIP=1, which turns exactly that case into a loud skip;
#  2. installs what is missing: docker.io (apt; its packaged services are kept
#     from starting: policy-rc.d during the install, and `systemctl mask` on a
#     systemd host), for arm64 qemu-user-static, the aarch64 cross linker and
#     the rustup target, SAM CLI (scripts/python-tools.sh) and DynamoDB Local;
#  3. builds the three functions for the template's architecture (arm64) as
#     debug builds into CARGO_TARGET_DIR (or target/) and copies each to its
#     own folder as `bootstrap` (or, with SAM_LOCAL_BOOTSTRAPS=DIR, takes
#     DIR/<Function>/bootstrap as built: `make test` passes what the deploy
#     rehearsal's `sam build` just made and checked); checks that none needs
#     more than GLIBC_2.34 (provided.al2023's glibc);
#  4. builds the base image offline from Debian packages (no registry can be
#     reached: tests/sam-local/base_image.py);
#  5. in a private network + mount + PID namespace (`unshare`): starts dockerd
#     (no iptables, its own data root on a tmpfs, exec root and socket), loads
#     the base image, starts DynamoDB Local, creates the tables, and runs
#     tests/sam-local/run.py: `sam local invoke` per step of
#     tests/sam-local/expectations.tsv, then `sam local start-api` + curl;
#  6. stops everything it started by its own process ids (the PID namespace
#     ends with its first process, so nothing can outlive the run), removes
#     its cgroups and its binfmt_misc entry, and checks that the host's network
#     interfaces, addresses, routes, iptables/nftables rules, mounts, binfmt
#     entries and cgroups are as they were and that no process of the run is
#     left. This also runs when a step fails or the run is interrupted.
#
# Debug builds: `sam build` (release, zig cross link) takes about 8 minutes per
# cold arm64 build here; a debug build a minute or two, and the same code runs.
# arm64 binaries run under qemu-user-static through a binfmt_misc entry this
# script registers for the run only (flag F: the emulator is opened at
# registration, so it works inside containers). Where the aarch64 Rust target
# cannot be installed (rustup's server unreachable) or binfmt_misc is missing,
# it runs an x86_64 build of the same template instead and says so;
# SAM_LOCAL_ARCH=x86_64 or arm64 chooses explicitly (arm64 then fails rather
# than falls back).
#
# Nothing here touches the host's network: dockerd, its bridge, DynamoDB Local,
# SAM and curl all live in the private network namespace, which only has
# loopback and the daemon's bridge.
#
#   scripts/sam-local.sh              # what `make sam-local` runs
#   SAM_LOCAL_ARCH=x86_64 scripts/sam-local.sh
#   SAM_LOCAL_BOOTSTRAPS=DIR scripts/sam-local.sh  # DIR/OrdersApiFunction/bootstrap, ...
#   SAM_LOCAL_ALLOW_SKIP=1 make test  # on a machine that cannot run dockerd
#   SAM_LOCAL_INSTALL_ONLY=1 scripts/sam-local.sh  # the installs alone (make
#                                    # test makes them while it compiles)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P) # physical, as cargo records it in the debug info
state="$root/target/sam-local"
run_id=${SAM_LOCAL_RUN_ID:-$$}
cgroup_name="lambda-idempotency-sam-local-$run_id"
binfmt_name="lambda-idempotency-sam-local-aarch64"
base_tag_prefix="lambda-idempotency/sam-local-base"
functions=(OrdersApiFunction:orders-api OrderEventsFunction:order-events SweeperFunction:sweeper)
max_glibc=2.34 # provided.al2023 (scripts/bootstrap-check.sh)

say() { echo "sam-local: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }

# ---------------------------------------------------------------------------
# Inside the private namespaces (PID 1 there). Everything it starts dies with
# it: a PID namespace's processes are killed when its first process exits.
# ---------------------------------------------------------------------------
if [ "${1:-}" = "--inside" ]; then
  run="$SAM_LOCAL_RUN"
  dockerd_pid=""
  # shellcheck disable=SC2317 # run by the EXIT trap
  inner_cleanup() {
    local rc=$?
    set +e
    if [ -n "$dockerd_pid" ] && kill -0 "$dockerd_pid" 2>/dev/null; then
      containers=$(docker ps -aq 2>/dev/null)
      # shellcheck disable=SC2086 # one id a word
      [ -n "$containers" ] && docker rm -f $containers >/dev/null 2>&1
      kill -TERM "$dockerd_pid"
      for _ in $(seq 1 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$dockerd_pid" 2>/dev/null && kill -KILL "$dockerd_pid"
      wait "$dockerd_pid" 2>/dev/null
    fi
    [ -e "/proc/sys/fs/binfmt_misc/$binfmt_name" ] && echo -1 >"/proc/sys/fs/binfmt_misc/$binfmt_name"
    # The containers' cgroups are gone with them; their parent is not.
    for dir in /sys/fs/cgroup/*/"$cgroup_name" /sys/fs/cgroup/"$cgroup_name"; do
      [ -d "$dir" ] && find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
    exit "$rc"
  }
  trap inner_cleanup EXIT
  # PID 1 of a namespace ignores signals it has no handler for.
  trap 'exit 143' TERM INT HUP

  echo "$(readlink /proc/self/ns/net) $(readlink /proc/self/ns/pid)" >"$run/namespaces"
  ip link set lo up
  if [ -n "$SAM_LOCAL_EMULATED" ]; then
    # arm64 on x86_64: the kernel runs arm64 binaries through qemu, also in the
    # containers. The entry (same magic and mask as qemu-user-static's own; F
    # opens the emulator now, so containers need no copy of it) lives while a
    # binfmt_misc mount does: this namespace's, unless the host has its own
    # mount, hence the explicit removal in the cleanup.
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    binfmt=/proc/sys/fs/binfmt_misc
    magic='\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
    mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
    # A stale entry of an interrupted run (only where the host mounts binfmt_misc).
    if [ -e "$binfmt/$binfmt_name" ]; then echo -1 >"$binfmt/$binfmt_name"; fi
    printf '%s' ":$binfmt_name:M::$magic:$mask:/usr/bin/qemu-aarch64-static:F" >"$binfmt/register"
  fi
  # A private /run hides the host's container sockets (dockerd would use a
  # running system containerd) and holds the daemon's exec root; the data
  # root is a tmpfs too. Both vanish with this mount namespace.
  mount -t tmpfs -o mode=755 tmpfs /run
  mkdir -p "$run/docker"
  mount -t tmpfs -o mode=711 tmpfs "$run/docker"
  export DOCKER_HOST="unix://$run/docker.sock"
  # Without iptables, ports are published by docker-proxy, which accepts
  # before the container listens; the wrapper starts it only once the
  # container's port is up, so SAM's wait for the container works as on a
  # normal Docker host (see tests/sam-local/docker-proxy-when-ready).
  dockerd --iptables=false --ip6tables=false --data-root "$run/docker/data" \
    --exec-root /run/sam-local-docker --pidfile /run/sam-local-docker.pid \
    -H "$DOCKER_HOST" --cgroup-parent "$cgroup_name" --log-level warn \
    --userland-proxy-path "$root/tests/sam-local/docker-proxy-when-ready" \
    >"$SAM_LOCAL_LOGS/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 1 300); do
    docker version >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || { tail -n 30 "$SAM_LOCAL_LOGS/dockerd.log" >&2; die "dockerd exited"; }
    sleep 0.1
  done
  docker version >/dev/null 2>&1 || { tail -n 30 "$SAM_LOCAL_LOGS/dockerd.log" >&2; die "dockerd did not answer in 30 s"; }
  say "dockerd $(docker version --format '{{.Server.Version}}') running in a private network namespace (pid $dockerd_pid)"
  docker load -q -i "$SAM_LOCAL_BASE_TAR" >/dev/null
  # DynamoDB Local inside the namespace too: the containers reach it through
  # the bridge as host.docker.internal.
  # In the background and waited for, so that a SIGTERM runs the trap at once.
  scripts/dynamodb-local.sh "$0" --with-dynamodb &
  wait $!
  exit 0
fi

if [ "${1:-}" = "--with-dynamodb" ]; then
  port=${AWS_ENDPOINT_URL_DYNAMODB##*:}
  export IDEMPOTENCY_TABLE=sam-local-idempotency ORDERS_TABLE=sam-local-orders
  "$SAM_LOCAL_DEMO" create-tables
  endpoint="http://host.docker.internal:$port"
  # --env-vars: SAM passes these only because the template declares them.
  # The invokes get exactly docs/sam-local.md's env.json (the sweeper included: its
  # stream follows AWS_ENDPOINT_URL_DYNAMODB, and SAM sets the declared
  # AWS_ENDPOINT_URL_DYNAMODB_STREAMS to an empty string); start-api adds a
  # 1.5 s provider.
  cat >"$SAM_LOCAL_RUN/env-0.json" <<EOF
{"Parameters": {"AWS_ENDPOINT_URL_DYNAMODB": "$endpoint",
  "IDEMPOTENCY_TABLE": "$IDEMPOTENCY_TABLE", "ORDERS_TABLE": "$ORDERS_TABLE",
  "IDEMPOTENCY_STORE_TIMEOUT_MS": "10000"}}
EOF
  cat >"$SAM_LOCAL_RUN/env-1500.json" <<EOF
{"Parameters": {"AWS_ENDPOINT_URL_DYNAMODB": "$endpoint",
  "IDEMPOTENCY_TABLE": "$IDEMPOTENCY_TABLE", "ORDERS_TABLE": "$ORDERS_TABLE",
  "IDEMPOTENCY_STORE_TIMEOUT_MS": "10000", "SIMULATED_PROVIDER_LATENCY_MS": "1500"}}
EOF
  # SAM asks STS for the caller's identity on every invoke: a closed local
  # port answers at once (otherwise ~10 s of retries per invoke). Nothing here
  # can reach AWS anyway.
  export AWS_ENDPOINT_URL_STS=http://127.0.0.1:9 AWS_MAX_ATTEMPTS=1
  # The start-api requests run with a 1.5 s provider, so that the two
  # concurrent POSTs overlap while the first is charged.
  exec python tests/sam-local/run.py --template "$SAM_LOCAL_TEMPLATE" \
    --env-vars "$SAM_LOCAL_RUN/env-0.json" --api-env-vars "$SAM_LOCAL_RUN/env-1500.json" \
    --events events --manifest tests/sam-local/expectations.tsv \
    --invoke-image "$SAM_LOCAL_BASE_TAG" --logs "$SAM_LOCAL_LOGS"
fi

# ---------------------------------------------------------------------------
# On the host.
# ---------------------------------------------------------------------------
started_at=$(date +%s)
set -E
trap 'say "FAILED: \`$BASH_COMMAND\` exited $? (line $LINENO)"' ERR

unsupported() {
  say "this machine cannot run sam local: $1"
  say "what to do: $2"
  if [ "${SAM_LOCAL_ALLOW_SKIP:-}" = 1 ]; then
    say "SKIPPED (SAM_LOCAL_ALLOW_SKIP=1): sam local invoke and start-api were NOT run"
    exit 0
  fi
  say "(set SAM_LOCAL_ALLOW_SKIP=1 to skip this check on such a machine)"
  exit 1
}

[ "$(uname -s)" = Linux ] ||
  unsupported "it is $(uname -s), and the script runs dockerd in Linux namespaces" \
    "run it on Linux (a VM is fine), or use the manual steps of docs/sam-local.md with Docker Desktop"
[ "$(id -u)" -eq 0 ] ||
  unsupported "it needs root: dockerd and the private network/mount/PID namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN" \
    "run it as root (sudo -E make sam-local) on a Linux host or VM, or in a container started with --privileged"
command -v unshare >/dev/null ||
  unsupported "unshare (util-linux) is missing" "apt-get install util-linux"
if ! ns_error=$(unshare --net --mount --pid --fork --mount-proc true 2>&1); then
  unsupported "it cannot create network, mount and PID namespaces (unshare: $ns_error)" \
    "run it on a Linux host or VM as root, or in a container started with --privileged"
fi
grep -q " cgroup" /proc/self/mountinfo ||
  unsupported "no cgroup file system is mounted (dockerd needs one)" \
    "mount cgroup2 on /sys/fs/cgroup (a normal Linux host has it), or run in a --privileged container"

mkdir -p "$state"
exec 9>"$state/lock"
flock -n 9 || die "another scripts/sam-local.sh is running in this work tree ($state/lock)"

# --- architecture ------------------------------------------------------------
template_arch=$(grep -m1 -oE 'Architectures: \[(arm64|x86_64)\]' template.yaml | grep -oE 'arm64|x86_64')
arch=${SAM_LOCAL_ARCH:-$template_arch}
case "$arch" in arm64 | x86_64) ;; *) die "SAM_LOCAL_ARCH=$arch: use arm64 or x86_64" ;; esac
host_arch=$(uname -m)
arch_note="as in template.yaml"
[ "$arch" = "$template_arch" ] || arch_note="SAM_LOCAL_ARCH=$arch; template.yaml deploys $template_arch"

apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then apt-get update -qq >&2; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

emulated=""
if [ "$arch" = arm64 ] && [ "$host_arch" = x86_64 ]; then
  emulated=1
  why_not=""
  if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
    say "installing the Rust target aarch64-unknown-linux-gnu (rustup)"
    rustup target add aarch64-unknown-linux-gnu >&2 || why_not="rustup could not install the aarch64-unknown-linux-gnu target"
  fi
  grep -qw binfmt_misc /proc/filesystems || why_not="the kernel has no binfmt_misc (needed to run arm64 binaries under qemu)"
  if [ -n "$why_not" ]; then
    if [ -n "${SAM_LOCAL_ARCH:-}" ]; then die "SAM_LOCAL_ARCH=arm64, but $why_not"; fi
    say "NOTE: $why_not: running an x86_64 build of the same template instead of arm64"
    arch=x86_64 emulated="" arch_note="x86_64 copy of the arm64 template: $why_not"
  fi
fi
case "$arch/$host_arch" in
  arm64/x86_64 | arm64/aarch64 | x86_64/x86_64) ;;
  *) die "running $arch functions on a $host_arch host is not supported here: set SAM_LOCAL_ARCH" ;;
esac
case "$arch" in
  arm64) triple=aarch64-unknown-linux-gnu deb_arch=arm64 ;;
  x86_64) triple=x86_64-unknown-linux-gnu deb_arch=amd64 ;;
esac

# Prebuilt bootstraps (SAM_LOCAL_BOOTSTRAPS) are the template's architecture;
# an x86_64 fallback builds its own.
prebuilt=${SAM_LOCAL_BOOTSTRAPS:-}
if [ -n "$prebuilt" ] && [ "$arch" != "$template_arch" ]; then
  say "NOTE: SAM_LOCAL_BOOTSTRAPS holds $template_arch bootstraps, this run is $arch: building instead"
  prebuilt=""
fi

# --- installs ----------------------------------------------------------------
if ! command -v dockerd >/dev/null || ! command -v containerd >/dev/null || ! command -v runc >/dev/null; then
  say "installing docker.io (apt); its services are kept from starting"
  if [ -d /run/systemd/system ]; then
    # Persistent: the packaged daemons must never start on this host, now or
    # at boot; this script runs its own daemon in a private namespace.
    systemctl mask docker.service docker.socket containerd.service >&2
  fi
  policy=/usr/sbin/policy-rc.d
  policy_backup=""
  if [ -e "$policy" ]; then policy_backup=$(mktemp); cp -p "$policy" "$policy_backup"; fi
  printf '#!/bin/sh\n# scripts/sam-local.sh: no service starts while docker.io installs\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  daemons() { { pgrep -x dockerd || true; pgrep -x containerd || true; } | sort; }
  daemons_before=$(daemons)
  install_rc=0
  apt_install docker.io || install_rc=$?
  if [ -n "$policy_backup" ]; then mv "$policy_backup" "$policy"; else rm -f "$policy"; fi
  [ "$install_rc" -eq 0 ] || die "apt-get install docker.io failed"
  started=$(comm -13 <(echo "$daemons_before") <(daemons))
  [ -z "$started" ] || die "installing docker.io started the packaged daemon (pids: $started); stop it and disable its service"
fi
command -v docker >/dev/null || die "no docker client on PATH (docker.io installs one)"
missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v curl >/dev/null || missing+=(curl)
command -v readelf >/dev/null || missing+=(binutils)
[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
if [ -n "$emulated" ]; then
  # The cross linker only for a build of our own.
  [ -n "$prebuilt" ] || command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
  [ -x /usr/bin/qemu-aarch64-static ] || missing+=(qemu-user-static)
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} (apt)"
  apt_install "${missing[@]}"
fi
if [ -n "${SAM_LOCAL_INSTALL_ONLY:-}" ]; then
  say "installed what a run needs (SAM_LOCAL_INSTALL_ONLY)"
  exit 0
fi

# shellcheck source=scripts/python-tools.sh
source scripts/python-tools.sh
# DynamoDB Local is installed (and started once) here: inside the namespace
# there is no network to install it from.
scripts/dynamodb-local.sh true || die "DynamoDB Local could not be installed or started"

# --- build -------------------------------------------------------------------
target_dir=${CARGO_TARGET_DIR:-$root/target}
if [ -n "$emulated" ]; then
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
fi
# shellcheck source=scripts/bootstrap-check.sh
source scripts/bootstrap-check.sh
build_started=$(date +%s)
rm -rf "$state/build" && mkdir -p "$state/build"
if [ -n "$prebuilt" ]; then
  case "$arch" in arm64) machine=AArch64 ;; x86_64) machine="Advanced Micro Devices X86-64" ;; esac
  for f in "${functions[@]}"; do
    name=${f%%:*}
    [ -f "$prebuilt/$name/bootstrap" ] ||
      die "SAM_LOCAL_BOOTSTRAPS=$prebuilt has no $name/bootstrap (scripts/deploy-check.sh with DEPLOY_CHECK_BOOTSTRAPS=$prebuilt writes one per function; or unset it to build here)"
    [ "$(bootstrap_machine "$prebuilt/$name/bootstrap")" = "$machine" ] ||
      die "$prebuilt/$name/bootstrap is not an $machine ELF ($arch): rebuild it, or unset SAM_LOCAL_BOOTSTRAPS"
    mkdir -p "$state/build/$name"
    cp "$prebuilt/$name/bootstrap" "$state/build/$name/bootstrap"
  done
  say "functions: $arch bootstraps from $prebuilt (SAM_LOCAL_BOOTSTRAPS), not built here"
else
  packages=()
  for f in "${functions[@]}"; do packages+=(-p "${f#*:}"); done
  say "building ${packages[*]//-p /} for $triple (debug) into $target_dir"
  cargo build --quiet --target "$triple" "${packages[@]}"
  for f in "${functions[@]}"; do
    name=${f%%:*} bin=${f#*:}
    mkdir -p "$state/build/$name"
    cp "$target_dir/$triple/debug/$bin" "$state/build/$name/bootstrap"
    # A shared CARGO_TARGET_DIR may hold another work tree's build of the same
    # binary; its debug info names the work tree it was built in.
    grep -a -z -q -x -F "$root" "$state/build/$name/bootstrap" ||
      die "$target_dir/$triple/debug/$bin was not built from $root (another work tree shares CARGO_TARGET_DIR?): run again"
  done
fi
functions_built=$(date +%s)
# The table-creating helper (make test has built it by now).
cargo build --quiet -p tools --bin demo
cp "$target_dir/debug/demo" "$state/build/demo"
grep -a -z -q -x -F "$root" "$state/build/demo" ||
  die "$target_dir/debug/demo was not built from $root (another work tree shares CARGO_TARGET_DIR?): run again"
if [ -n "$prebuilt" ]; then
  say "built: the table helper in $(($(date +%s) - functions_built)) s"
else
  say "built: functions in $((functions_built - build_started)) s, the table helper in $(($(date +%s) - functions_built)) s"
fi

for f in "${functions[@]}"; do
  name=${f%%:*}
  needs=$(bootstrap_glibc "$state/build/$name/bootstrap")
  [ -n "$needs" ] || die "$name: no GLIBC version found in its bootstrap"
  glibc_at_most "$needs" "$max_glibc" ||
    die "$name: bootstrap needs GLIBC_$needs, provided.al2023 has $max_glibc (the local base has Debian's 2.36, so only this check catches it)"
  say "glibc  $name bootstrap needs GLIBC_$needs (provided.al2023: $max_glibc): ok"
done

# --- base image (offline) ----------------------------------------------------
base_tag="$base_tag_prefix:$arch"
base_tar="$state/base-$arch.tar"
if [ ! -s "$base_tar" ]; then
  say "building the base image $base_tag from Debian packages (libc6, libgcc-s1, busybox-static, $deb_arch)"
  apt_dir="$state/apt-$deb_arch"
  rm -rf "$apt_dir" && mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
  : >"$apt_dir/status"
  # A private apt state: the host's sources, this architecture, nothing of the
  # host's package database touched.
  apt_opts=(-o "APT::Architecture=$deb_arch" -o "APT::Architectures::=$deb_arch"
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o "Dir::State::status=$apt_dir/status" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" update -qq >&2
  (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download libc6 libgcc-s1 busybox-static >&2)
  python tests/sam-local/base_image.py --arch "$arch" --debs "$apt_dir/debs" \
    --ca-bundle /etc/ssl/certs/ca-certificates.crt --tag "$base_tag" --out "$base_tar.tmp" >&2
  mv "$base_tar.tmp" "$base_tar"
  rm -rf "$apt_dir"
fi

python tests/sam-local/built_template.py --template template.yaml --code "$state/build" \
  --arch "$arch" --out "$state/template.yaml"

# --- host state, before --------------------------------------------------------
binfmt_ctl() {
  # binfmt_misc mounted in a throw-away mount namespace: the host's mounts stay
  # as they are, and it sees the entries of any other mount that is alive.
  # shellcheck disable=SC2016 # expanded by that sh
  unshare --mount --propagation private sh -c '
    d=/proc/sys/fs/binfmt_misc
    [ -e "$d/register" ] || mount -t binfmt_misc binfmt_misc "$d" || exit 1
    case "$1" in
      list) ls "$d" | sort ;;
      remove) if [ -e "$d/$2" ]; then echo -1 >"$d/$2"; fi ;;
    esac' binfmt "$@"
}
host_state() (
  set +e +o pipefail
  echo "== links"; ip -o link show | sed -E 's/ +/ /g'
  echo "== addresses"; ip -o addr show | sed -E 's/(valid_lft|preferred_lft) [^ ]+//g; s/ +/ /g'
  echo "== routes"; ip -4 route show table all; ip -6 route show table all | sed -E 's/expires [^ ]+//g'
  echo "== rules"; ip rule show
  echo "== netns"; ip netns list 2>&1
  echo "== forwarding"; cat /proc/sys/net/ipv4/ip_forward
  for tool in iptables-save ip6tables-save; do
    echo "== $tool"
    if command -v "$tool" >/dev/null; then "$tool" 2>&1 | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]//g'; fi
  done
  echo "== nft"; if command -v nft >/dev/null; then nft list ruleset 2>&1; fi
  echo "== mounts"; awk '{for (i = 7; i <= NF; i++) if ($i == "-") { print $5, $(i + 1); break }}' /proc/self/mountinfo | sort
  echo "== binfmt_misc"; binfmt_ctl list 2>&1
  echo "== cgroups"; ls -d /sys/fs/cgroup/*/lambda-idempotency-sam-local-* /sys/fs/cgroup/lambda-idempotency-sam-local-* 2>/dev/null || true
  echo "== modules"; if [ -r /proc/modules ]; then cut -d' ' -f1 /proc/modules | sort; fi
)
run="$state/run-$run_id"
logs="$state/logs"
rm -rf "$logs" "$state"/run-* && mkdir -p "$run" "$logs"
host_state >"$logs/host-before.txt"

ns_pid=""
outer_cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM HUP ERR
  if [ -n "$ns_pid" ]; then
    # Interrupted while the namespace runs: SIGTERM to its first process
    # (unshare's child), whose trap stops the daemon; SIGKILL if it does not
    # end within 30 s, which ends every process of the PID namespace.
    local init
    init=$(pgrep -P "$ns_pid" 2>/dev/null)
    if [ -n "$init" ]; then
      kill -TERM "$init" 2>/dev/null
      for _ in $(seq 1 300); do kill -0 "$init" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$init" 2>/dev/null && kill -KILL "$init" 2>/dev/null
    fi
    wait "$ns_pid" 2>/dev/null
  fi
  # Normally removed inside already (and gone with the namespace's mount).
  [ -n "$emulated" ] && binfmt_ctl remove "$binfmt_name"
  for dir in /sys/fs/cgroup/*/"$cgroup_name" /sys/fs/cgroup/"$cgroup_name"; do
    [ -d "$dir" ] && find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null
  done

  # The checks: nothing of the run is left, the host is as it was.
  local left="" ids pid
  ids=$(cat "$run/namespaces" 2>/dev/null)
  if [ -n "$ids" ]; then
    for pid in /proc/[0-9]*; do
      case " $ids " in
        *" $(readlink "$pid/ns/net" 2>/dev/null) "* | *" $(readlink "$pid/ns/pid" 2>/dev/null) "*) left="$left ${pid#/proc/}" ;;
      esac
    done
  fi
  host_state >"$logs/host-after.txt"
  if [ -n "$left" ]; then
    say "FAILED: processes of the run are still alive:$left"
    rc=1
  elif ! diff -u "$logs/host-before.txt" "$logs/host-after.txt" >"$logs/host-diff.txt"; then
    say "FAILED: the host changed during the run:"
    cat "$logs/host-diff.txt" >&2
    rc=1
  else
    say "cleanup: no process, daemon, namespace, mount, cgroup or binfmt entry of the run is left; host interfaces, addresses, routes and iptables/nftables rules as before"
  fi
  rm -rf "$run"
  if [ "$rc" -eq 0 ]; then
    say "passed in $(($(date +%s) - started_at)) s ($arch, $arch_note)"
  elif [ "$rc" -eq 130 ] || [ "$rc" -eq 143 ]; then
    say "interrupted after $(($(date +%s) - started_at)) s; logs in $logs"
  else
    say "FAILED after $(($(date +%s) - started_at)) s ($arch); logs in $logs"
  fi
  exit "$rc"
}
trap outer_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

say "running $arch functions ($arch_note)"
export SAM_LOCAL_RUN="$run" SAM_LOCAL_LOGS="$logs" SAM_LOCAL_TEMPLATE="$state/template.yaml"
export SAM_LOCAL_BASE_TAR="$base_tar" SAM_LOCAL_BASE_TAG="$base_tag" SAM_LOCAL_DEMO="$state/build/demo"
export SAM_LOCAL_RUN_ID="$run_id" SAM_LOCAL_EMULATED="$emulated"
unshare --net --mount --pid --fork --mount-proc --propagation private --kill-child=SIGTERM "$0" --inside &
ns_pid=$!
wait "$ns_pid"
ns_pid=""
