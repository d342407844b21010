#!/usr/bin/env bash
# Runs upstream kube-proxy v1.36.3 (bin/kube-proxy, built by the tools module) in nftables mode,
# in a network namespace of its own, against the control plane of `make up`, and shows that it
# programs a Service from the EndpointSlices bin/endpoints-controller writes: the Service's
# nftables chains and kube-proxy's own metrics. The host's rules are never touched: every rule
# lives in the namespace.
#
# The apiserver of `make up` listens on 127.0.0.1 only, which a namespace cannot reach: a veth
# pair links the namespace to the host (169.254.123.1 host side, .2 in the namespace) and a
# small TCP relay on the host side forwards to the apiserver. kube-proxy's kubeconfig points at
# the relay and verifies the apiserver's certificate for 127.0.0.1 (tls-server-name).
#
# Needs root (ip netns, nft), iproute2, nftables (Debian: apt-get install nftables iproute2),
# python3 (reads kube-proxy's metrics), bin/tcpforward (the relay), a running `make up`, and bin/kube-proxy.
# Usage: deploy/local/kubeproxy-nft.sh up|show|down
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

NS=kcm-split-kp
HOST_IF=kcmsplit-kp0 NS_IF=kcmsplit-kp1
HOST_IP=169.254.123.1 NS_IP=169.254.123.2
STATE=$LOCAL/kubeproxy-nft # pids, kubeconfig (not in $RUN: make down does not know them)
NODE=${KP_NODE:-} # the node kube-proxy acts for; default the first node
DEMO_NS=kp-demo

kctl() { "$BIN/kubectl" --kubeconfig="$KUBECONFIG_FILE" "$@"; }

# stop_pid FILE: SIGTERM the process recorded in FILE, then SIGKILL after 10s.
stop_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

down() {
  stop_pid "$STATE/kube-proxy.pid"
  stop_pid "$STATE/relay.pid"
  if ip netns list | grep -qw "$NS"; then ip netns del "$NS"; fi
  if ip link show "$HOST_IF" >/dev/null 2>&1; then ip link del "$HOST_IF"; fi
  say "kube-proxy, its relay and network namespace $NS are gone"
}

up() {
  [ "$(id -u)" = 0 ] || die "needs root (ip netns, nft)"
  for tool in ip nft python3; do command -v "$tool" >/dev/null || die "'$tool' is required (Debian: apt-get install iproute2 nftables python3)"; done
  for b in kube-proxy tcpforward; do [ -x "$BIN/$b" ] || die "$BIN/$b is missing: make tools builds it"; done
  [ -f "$RUN/ports.env" ] || die "make up is not running here (no $RUN/ports.env)"
  # shellcheck disable=SC1091
  source "$RUN/ports.env"
  [ -n "${API_PORT:-}" ] || die "no API_PORT in $RUN/ports.env"
  mkdir -p "$STATE" "$LOGS"
  if [ -f "$STATE/kube-proxy.pid" ] && kill -0 "$(cat "$STATE/kube-proxy.pid")" 2>/dev/null; then
    say "already up (pid $(cat "$STATE/kube-proxy.pid")); '$0 down' stops it"
    return
  fi

  # The namespace and its link to the host.
  ip netns add "$NS"
  ip link add "$HOST_IF" type veth peer name "$NS_IF"
  ip link set "$NS_IF" netns "$NS"
  ip addr add "$HOST_IP/30" dev "$HOST_IF"
  ip link set "$HOST_IF" up
  ip netns exec "$NS" ip addr add "$NS_IP/30" dev "$NS_IF"
  ip netns exec "$NS" ip link set "$NS_IF" up
  ip netns exec "$NS" ip link set lo up

  # The relay: HOST_IP:API_PORT -> 127.0.0.1:API_PORT (the same relay the real node uses).
  setsid "$BIN/tcpforward" -listen "$HOST_IP:$API_PORT" -to "127.0.0.1:$API_PORT" >"$LOGS/kubeproxy-relay.log" 2>&1 9>&- &
  echo $! >"$STATE/relay.pid"

  # kube-proxy's kubeconfig: make up's admin credential, through the relay.
  cp "$KUBECONFIG_FILE" "$STATE/kubeconfig"
  local cluster
  cluster=$("$BIN/kubectl" --kubeconfig="$STATE/kubeconfig" config view -o jsonpath='{.clusters[0].name}')
  "$BIN/kubectl" --kubeconfig="$STATE/kubeconfig" config set-cluster "$cluster" \
    --server="https://$HOST_IP:$API_PORT" --tls-server-name=127.0.0.1 >/dev/null

  if [ -z "$NODE" ]; then NODE=$(kctl get nodes -o jsonpath='{.items[0].metadata.name}'); fi
  # --conntrack-max-per-core=0: leave the host's (not namespaced) conntrack table size alone.
  setsid ip netns exec "$NS" "$BIN/kube-proxy" --proxy-mode=nftables --kubeconfig="$STATE/kubeconfig" \
    --hostname-override="$NODE" --cluster-cidr="${POD_CIDR:-198.51.100.0/24}" --conntrack-max-per-core=0 \
    --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 --v=2 \
    >"$LOGS/kube-proxy.log" 2>&1 9>&- &
  echo $! >"$STATE/kube-proxy.pid"
  for _ in $(seq 60); do
    if ip netns exec "$NS" nft list table ip kube-proxy >/dev/null 2>&1; then
      say "kube-proxy (pid $(cat "$STATE/kube-proxy.pid")) programs nftables in namespace $NS for node $NODE; log: $LOGS/kube-proxy.log"
      return
    fi
    kill -0 "$(cat "$STATE/kube-proxy.pid")" 2>/dev/null || { tail -20 "$LOGS/kube-proxy.log" >&2; down; die "kube-proxy exited"; }
    sleep 1
  done
  tail -20 "$LOGS/kube-proxy.log" >&2
  die "kube-proxy made no nftables table within 60s"
}

# show: a Deployment of 3 and a Service in $DEMO_NS, then the Service's rules and endpoint IPs
# as kube-proxy programmed them, beside the EndpointSlice endpoints-controller wrote.
show() {
  kctl get ns "$DEMO_NS" >/dev/null 2>&1 || kctl create ns "$DEMO_NS" >/dev/null
  kctl -n "$DEMO_NS" get deployment web >/dev/null 2>&1 || kctl -n "$DEMO_NS" create deployment web --image=nginx --replicas=3 >/dev/null
  kctl -n "$DEMO_NS" get service web >/dev/null 2>&1 || kctl -n "$DEMO_NS" expose deployment web --port=80 >/dev/null
  local ips="" want cip
  cip=$(kctl -n "$DEMO_NS" get service web -o jsonpath='{.spec.clusterIP}')
  for _ in $(seq 60); do
    ips=$(kctl -n "$DEMO_NS" get endpointslices -l kubernetes.io/service-name=web \
      -o jsonpath='{range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]}{"\n"}{end}' | sort)
    [ "$(echo "$ips" | grep -c .)" = 3 ] && break
    sleep 1
  done
  echo "== EndpointSlice of $DEMO_NS/web (managed by $(kctl -n "$DEMO_NS" get endpointslices -l kubernetes.io/service-name=web -o jsonpath='{.items[0].metadata.labels.endpointslice\.kubernetes\.io/managed-by}'), written by $(kctl -n "$DEMO_NS" get endpointslices -l kubernetes.io/service-name=web -o jsonpath='{.items[0].metadata.managedFields[0].manager}')): ready endpoints"
  echo "$ips"
  want=$ips
  local rules=""
  for _ in $(seq 30); do
    rules=$(ip netns exec "$NS" nft list table ip kube-proxy)
    local all=1
    for ip in $want; do echo "$rules" | grep -q "$ip" || all=0; done
    if [ "$all" = 1 ] && echo "$rules" | grep -q "$cip"; then break; fi
    sleep 1
  done
  echo "== kube-proxy's nftables rules for $DEMO_NS/web (ClusterIP $cip), namespace $NS"
  echo "$rules" | grep -E "$cip|$DEMO_NS/web|$(echo "$want" | paste -sd'|')" || true
  echo "== kube-proxy metrics"
  ip netns exec "$NS" python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:10249/metrics").read().decode())' |
    grep -E '^kubeproxy_sync_proxy_rules_(last_timestamp_seconds|endpoint_changes_total|service_changes_total|nftables_sync_failures_total)' || true
  local missing=0
  for ip in $want; do echo "$rules" | grep -q "$ip" || { echo "MISSING: endpoint $ip not in the rules"; missing=1; }; done
  echo "$rules" | grep -q "$cip" || { echo "MISSING: ClusterIP $cip not in the rules"; missing=1; }
  [ -n "$want" ] || missing=1
  if [ "$missing" = 0 ]; then say "OK: kube-proxy programs $DEMO_NS/web ($cip) with the $(echo "$want" | grep -c .) endpoints of its EndpointSlice"; else die "kube-proxy's rules do not match the EndpointSlice"; fi
}

case "${1:-}" in
up) up ;;
show) show ;;
down) down ;;
*) die "usage: $0 up|show|down" ;;
esac
