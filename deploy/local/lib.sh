# shellcheck shell=bash
# Shared by up.sh, down.sh and status.sh: paths, ports, process bookkeeping, stopping.
# Sourced, not run. Callers set -euo pipefail.
# shellcheck disable=SC2034 # the paths are for the callers

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/deploy/local
BIN=$ROOT/bin
LOCAL=$ROOT/.local      # git-ignored
RUN=$LOCAL/run          # <component>.pid, ports.env, lock
LOGS=$LOCAL/logs        # <component>.log
PKI=$LOCAL/pki          # CA, serving and client certs, service-account key (kept across runs)
DATA=$LOCAL/data        # etcd data (wiped by every fresh `make up`)
KUBECONFIG_FILE=$LOCAL/kubeconfig

# Seconds `down` waits after SIGTERM before SIGKILL. kcm-split binaries let workers finish for
# up to --shutdown-grace-period (20s) and then release their Lease, so wait a bit longer.
STOP_TIMEOUT=${STOP_TIMEOUT:-30}

# The apiserver and etcd stop last: the others need them to shut down cleanly (release Leases).
BACKEND=(kube-apiserver etcd)

say() { printf 'local: %s\n' "$*"; }
warn() { printf 'local: WARNING: %s\n' "$*" >&2; }
die() { printf 'local: ERROR: %s\n' "$*" >&2; exit 1; }

# as_root lets the calling script go on as root: it is root, or it runs again as root with the
# same environment and arguments where passwordless sudo allows it (a GitHub runner), or it dies
# saying why it needs root. Use: as_root "<what the script runs that needs root>" "$@".
as_root() {
  local why=$1
  shift
  [ "$(id -u)" != 0 ] || return 0
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    exec sudo -n -E env "PATH=$PATH" bash "$0" "$@"
  fi
  die "$why: run it as root"
}

# lock takes an exclusive lock for the rest of the script so that two up/down never interleave.
# Started daemons must not inherit fd 9 (see launch), or they would hold the lock forever.
lock() {
  mkdir -p "$RUN"
  exec 9>"$RUN/lock"
  flock -n 9 || die "another 'make up' or 'make down' is running (lock: $RUN/lock)"
}

# alive NAME: the process recorded in NAME.pid is running and is still bin/NAME (guards
# against a recycled pid). A zombie has an empty cmdline, so it counts as gone.
alive() {
  local pid argv0
  pid=$(cat "$RUN/$1.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  argv0=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | head -n1) || return 1
  [ "$argv0" = "$BIN/$1" ]
}

pid_of() { cat "$RUN/$1.pid"; }

# recorded lists the components that have a pid file.
recorded() {
  local f
  for f in "$RUN"/*.pid; do
    [ -e "$f" ] || continue
    f=${f##*/}
    echo "${f%.pid}"
  done
}

# living NAME...: prints the names whose process is alive.
living() {
  local name
  for name in "$@"; do
    if alive "$name"; then echo "$name"; fi
  done
}

# await_exit SECONDS NAME...: waits until none of NAME is alive; prints the survivors on timeout.
await_exit() {
  local deadline=$((SECONDS + $1)) left
  shift
  while :; do
    left=$(living "$@")
    if [ -z "$left" ] || [ "$SECONDS" -ge "$deadline" ]; then
      [ -z "$left" ] || echo "$left"
      return
    fi
    sleep 0.2
  done
}

# signal SIGNAL NAME...: sends SIGNAL to each living NAME.
signal() {
  local sig=$1 name
  shift
  for name in "$@"; do
    if alive "$name"; then kill "-$sig" "$(pid_of "$name")" 2>/dev/null || true; fi
  done
}

# stop_group NAME...: SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL; removes the pid files.
stop_group() {
  local left=()
  signal TERM "$@"
  mapfile -t left < <(await_exit "$STOP_TIMEOUT" "$@")
  if [ ${#left[@]} -gt 0 ]; then
    warn "still running ${STOP_TIMEOUT}s after SIGTERM, sending SIGKILL: ${left[*]}"
    signal KILL "${left[@]}"
    mapfile -t left < <(await_exit 10 "${left[@]}")
    [ ${#left[@]} -eq 0 ] || die "could not stop: ${left[*]}"
  fi
  local name
  for name in "$@"; do rm -f "$RUN/$name.pid"; done
}

# stop_all stops every recorded component: clients first, then the apiserver, then etcd.
# Prints what it stopped; returns 1 if nothing was recorded.
stop_all() {
  local all=() live=() front=() name b
  mapfile -t all < <(recorded)
  [ ${#all[@]} -gt 0 ] || return 1
  mapfile -t live < <(living "${all[@]}")
  for name in "${all[@]}"; do
    [[ " ${BACKEND[*]} " == *" $name "* ]] || front+=("$name")
  done
  [ ${#front[@]} -eq 0 ] || stop_group "${front[@]}"
  for b in "${BACKEND[@]}"; do
    if [ -f "$RUN/$b.pid" ]; then stop_group "$b"; fi
  done
  rm -f "$RUN/ports.env"
  say "stopped: ${live[*]:-nothing was running}"
  if [ ${#live[@]} -lt ${#all[@]} ]; then
    say "had already exited: $(comm -23 <(printf '%s\n' "${all[@]}" | sort) <(printf '%s\n' "${live[@]}" | sort) | tr '\n' ' ')"
  fi
}

# summary prints where things are; needs ports.env from up.sh.
summary() {
  local ETCD_PORT API_PORT CONTROLLER_PORTS=""
  [ -f "$RUN/ports.env" ] || return 0
  # shellcheck source=/dev/null
  source "$RUN/ports.env"
  cat <<EOF2
  apiserver   https://127.0.0.1:$API_PORT (etcd http://127.0.0.1:$ETCD_PORT)
  kubeconfig  $KUBECONFIG_FILE
  logs        $LOGS/<component>.log
  kcm-split   ${CONTROLLER_PORTS:-none built yet} (name=HTTPS port)
EOF2
}

# hints prints the commands to try first.
hints() {
  cat <<EOF2

Try:
  export KUBECONFIG=$KUBECONFIG_FILE
  bin/kubectl get nodes
  bin/kubectl get nodes -o custom-columns=NAME:.metadata.name,POD-RANGES:.spec.podCIDRs   # node IPAM
  bin/kubectl create deployment web --image=nginx --replicas=3
  bin/kubectl expose deployment web --port=80
  bin/kubectl get endpoints web
Scrape a controller (HTTPS with a token; system:monitoring may get /metrics):
  bin/kubectl create clusterrolebinding scrape --clusterrole=system:monitoring --serviceaccount=default:default
  curl -k -H "Authorization: Bearer \$(bin/kubectl create token default)" https://127.0.0.1:<port>/metrics
Stop with 'make down'.
EOF2
}

# report_failure PREFIX LOGNAME NAME MESSAGE: a component that did not come up, with the end of
# its log (.local/logs/LOGNAME.log); exits 1.
report_failure() {
  {
    printf '%s: ERROR: %s: %s\n' "$1" "$3" "$4"
    printf '%s: log: %s (last lines below)\n' "$1" "$LOGS/$2.log"
    tail -n 15 "$LOGS/$2.log" 2>/dev/null | sed 's/^/    /'
  } >&2
  exit 1
}

# poll_until ALIVE FAIL NAME TIMEOUT WHAT CMD...: polls CMD until it succeeds; calls FAIL NAME
# MESSAGE when ALIVE NAME says the component exited, or when TIMEOUT seconds pass.
poll_until() {
  local alive_fn=$1 fail_fn=$2 name=$3 timeout=$4 what=$5
  local deadline=$((SECONDS + timeout))
  shift 5
  until "$@" >/dev/null 2>&1; do
    "$alive_fn" "$name" || "$fail_fn" "$name" "exited while waiting for $what"
    [ "$SECONDS" -lt "$deadline" ] || "$fail_fn" "$name" "$what: not reached within ${timeout}s"
    sleep 0.5
  done
}

# The local cluster's address ranges and the guard that keeps test traffic on the machine.
# shellcheck source-path=SCRIPTDIR
source "$HERE/netguard.sh"
