# shellcheck shell=bash
# The network guard of a local cluster run as root (make up, make node-up and every suite on
# them): nothing sent toward the cluster's address ranges can leave the machine, whatever state
# kube-proxy is in, and a packet that tries is counted so the suite fails.
#   - Routes on the machine for every range (protocol $NG_PROTO, so they are found and removed
#     as ours): the Service range is local (a ClusterIP without a kube-proxy rule is refused on
#     the machine; with one, kube-proxy's DNAT in nat OUTPUT sends it on, as the
#     route lookup happens before it and needs a route that is not the default); every other
#     range unreachable, behind the routes the node and the tests add for their own links.
#   - An nftables table $NG_TABLE: a packet toward those ranges whose way out is a default-route
#     interface (after NAT) is counted, its destination kept (at most 256) and rejected.
# Sourced after lib.sh (needs ROOT, LOGS). Callers set -euo pipefail. No root: no guard (said once).
# shellcheck disable=SC2034 # the ranges are for the callers

# The local cluster's ranges, in one place (up.sh, node.sh and the suites read them here).
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1          # the first address: the "kubernetes" Service
NODE_IP=10.200.0.1            # the real node of `make node-up` (node.sh), on lo
NODE_FALLBACK_CIDR=10.88.0.0/24 # the node's Pods when no node IPAM gave it a range
# Pod ranges, documentation addresses (RFC 5737 TEST-NET-2, RFC 3849): nodelifecycle-controller
# (node IPAM) gives each node a /26 and a /64 of them; kwok takes Pod IPs from there.
POD_CIDR=198.51.100.0/24
POD_CIDR_IPV6=2001:db8:100::/56
KWOK_NODE_CIDR=10.240.0.0/24  # the kwok nodes' InternalIPs (nodes.yaml)
# lb-e2e's client link, inside 198.18.0.0/15. Not 203.0.113.0/24 (RFC 5737 TEST-NET-3), its
# first choice: on machines of this kind the Go module proxy and Debian's mirror resolve to
# 203.0.113.80, which the guard's route made unreachable while a cluster was up.
LB_E2E_NET=198.18.100.0/24
# Guarded besides: 198.18.0.0/15 (RFC 2544), the demo address pool of service-lb
# (manifests/servicelb-demo-pool.yaml: no machine of this kind holds it, while 192.0.2.0/24 can
# be the uplink), and all of 2001:db8::/32 (the IPv6 Pod range and the demo pool's).
NG_RANGES_V4=("$SERVICE_CIDR" "$NODE_IP/32" "$NODE_FALLBACK_CIDR" "$POD_CIDR" "$KWOK_NODE_CIDR" 198.18.0.0/15) # LB_E2E_NET inside the last
NG_RANGES_V6=(2001:db8::/32)

NG_TABLE=kcm_split_netguard
NG_PROTO=211 # routes of ours carry this protocol number (unassigned in /etc/iproute2/rt_protos)
NG_METRIC=4000 # below what the node and the tests add for their own links

ngsay() { printf 'netguard: %s\n' "$*"; }

# netguard_uplinks: the interfaces of the machine's default routes (IPv4 and IPv6), one a line.
netguard_uplinks() {
  { ip -4 route show default; ip -6 route show default 2>/dev/null; } |
    sed -n 's/.* dev \([^ ]*\).*/\1/p' | sort -u
}

# netguard_registry_hosts: the hosts of the package registries this machine fetches from: the
# Go module proxy (GOPROXY), apt's sources, npm's registry; NG_REGISTRY_HOSTS replaces them.
netguard_registry_hosts() {
  if [ -n "${NG_REGISTRY_HOSTS:-}" ]; then
    tr ' ' '\n' <<<"$NG_REGISTRY_HOSTS"
    return
  fi
  {
    echo proxy.golang.org
    echo deb.debian.org
    echo registry.npmjs.org
    { command -v go >/dev/null && go env GOPROXY; } 2>/dev/null | tr ',|' '\n\n' | sed -n 's|^https\{0,1\}://\([^/:]*\).*|\1|p'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      sed -n 's|^deb[^ ]* \(\[[^]]*\] \)\{0,1\}https\{0,1\}://\([^/:]*\).*|\2|p'
    cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's|^URIs: *https\{0,1\}://\([^/:]*\).*|\1|p'
  } | sort -u
}

# netguard_ip4_in ADDR CIDR: whether the IPv4 address lies in the range.
netguard_ip4_in() {
  local a1 a2 a3 a4 n1 n2 n3 n4 bits=${2#*/} mask
  [[ $2 == */* ]] || bits=32
  IFS=. read -r a1 a2 a3 a4 <<<"$1"
  IFS=. read -r n1 n2 n3 n4 <<<"${2%/*}"
  mask=$(((0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF))
  (((((a1 << 24) | (a2 << 16) | (a3 << 8) | a4) & mask) == (((n1 << 24) | (n2 << 16) | (n3 << 8) | n4) & mask)))
}

# netguard_overlaps prints each route of the machine (not ours, not a default) that lies inside
# one of the ranges or holds one of them: a range the machine already uses; and each package
# registry whose address (as this machine resolves it now) lies inside one: the guard's route
# would cut the machine off from it while a cluster is up.
netguard_overlaps() {
  local r fam host addr
  for r in "${NG_RANGES_V4[@]}" "${NG_RANGES_V6[@]}"; do
    fam=-4
    [[ $r == *:* ]] && fam=-6
    { ip "$fam" route show table all root "$r"; ip "$fam" route show table all match "$r"; } 2>/dev/null |
      grep -v " proto $NG_PROTO" | grep -vE '^(default|unreachable default|::/0|0\.0\.0\.0/0)( |$)' |
      grep -vE '^(broadcast|multicast|anycast) ' | sed "s|^|$r: |" || true
  done | sort -u
  for host in $(netguard_registry_hosts); do
    for addr in $(getent ahostsv4 "$host" 2>/dev/null | awk '{print $1}' | sort -u); do
      for r in "${NG_RANGES_V4[@]}"; do
        if netguard_ip4_in "$addr" "$r"; then
          echo "$r: $host (a package registry) resolves to $addr"
        fi
      done
    done
  done
}

netguard_active() { nft list table inet "$NG_TABLE" >/dev/null 2>&1; }

# netguard_up adds the routes and the table. Refuses ranges the machine already uses.
netguard_up() {
  if [ "$(id -u)" != 0 ]; then
    ngsay "not root: no guard (routes and counter need root); test traffic is not fenced"
    return 0
  fi
  command -v nft >/dev/null || {
    ngsay "installing Debian's nftables"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables >"$LOGS/apt-nftables.log" 2>&1 ||
      { apt-get update -q >>"$LOGS/apt-nftables.log" 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables >>"$LOGS/apt-nftables.log" 2>&1; } ||
      { printf 'netguard: ERROR: apt-get install nftables failed: %s\n' "$LOGS/apt-nftables.log" >&2; return 1; }
  }
  # One guard per machine: a cluster of another clone (or a crashed run's, removed by its
  # `make down`) keeps its table, routes and count.
  if netguard_active; then
    ngsay "already up (table $NG_TABLE, $(netguard_count) packets counted so far)"
    return 0
  fi
  netguard_down quiet
  local over
  over=$(netguard_overlaps)
  if [ -n "$over" ]; then
    printf 'netguard: ERROR: the local cluster'"'"'s ranges are in use on this machine:\n%s\n' "$over" >&2
    return 1
  fi
  local uplinks r
  uplinks=$(netguard_uplinks | paste -sd, -)
  ip route add local "$SERVICE_CIDR" dev lo table local proto "$NG_PROTO"
  for r in "${NG_RANGES_V4[@]}"; do
    [ "$r" = "$SERVICE_CIDR" ] || ip route add unreachable "$r" metric "$NG_METRIC" proto "$NG_PROTO"
  done
  for r in "${NG_RANGES_V6[@]}"; do
    ip -6 route add unreachable "$r" metric "$NG_METRIC" proto "$NG_PROTO" 2>/dev/null || true
  done
  local v4 v6 rules=""
  v4=$(printf '%s, ' "${NG_RANGES_V4[@]}")
  v6=$(printf '%s, ' "${NG_RANGES_V6[@]}")
  # No default route: nothing can take one, and the chains stay empty.
  if [ -n "$uplinks" ]; then
    local match
    match="oifname { $(sed 's/\([^,]*\)/"\1"/g' <<<"$uplinks") }"
    rules="$match ip daddr @v4 add @leaked_v4 { ip daddr } counter name leaked reject
    $match ip6 daddr @v6 add @leaked_v6 { ip6 daddr } counter name leaked reject"
  fi
  nft -f - <<EOF
table inet $NG_TABLE {
  counter leaked { }
  set v4 { type ipv4_addr; flags interval; elements = { ${v4%, } } }
  set v6 { type ipv6_addr; flags interval; elements = { ${v6%, } } }
  set leaked_v4 { type ipv4_addr; size 256; flags dynamic; }
  set leaked_v6 { type ipv6_addr; size 256; flags dynamic; }
  # After NAT (priority 100): what kube-proxy translated is judged by where it goes now.
  chain guard_out {
    type filter hook output priority 100; policy accept;
    $rules
  }
  chain guard_fwd {
    type filter hook forward priority 100; policy accept;
    $rules
  }
}
EOF
  ngsay "up: ${NG_RANGES_V4[*]} ${NG_RANGES_V6[*]} routed on the machine; packets toward them out of ${uplinks:-no uplink} counted and rejected"
}

# netguard_count: packets the guard has rejected so far (0 without a guard).
netguard_count() {
  nft list counter inet "$NG_TABLE" leaked 2>/dev/null | sed -n 's/.*packets \([0-9]*\).*/\1/p' | head -1 | grep . || echo 0
}

# netguard_verdict WHO: says what the guard counted; returns 1 if a packet headed for the
# default route, or if, as root, no guard is up.
netguard_verdict() {
  local who=$1 n
  if [ "$(id -u)" != 0 ]; then
    ngsay "$who: not root, no guard"
    return 0
  fi
  if ! netguard_active; then
    printf 'netguard: ERROR: %s: no guard table %s (make up starts it as root)\n' "$who" "$NG_TABLE" >&2
    return 1
  fi
  n=$(netguard_count)
  if [ "$n" != 0 ]; then
    printf 'netguard: ERROR: %s: %s packets toward the test ranges headed for the default route (rejected): %s\n' \
      "$who" "$n" "$(nft list set inet "$NG_TABLE" leaked_v4 2>/dev/null | tr -s ' \n' ' '; nft list set inet "$NG_TABLE" leaked_v6 2>/dev/null | tr -s ' \n' ' ')" >&2
    return 1
  fi
  ngsay "$who: 0 packets toward the test ranges headed for the default route"
}

# netguard_down [quiet] removes the table and every route of ours.
netguard_down() {
  [ "$(id -u)" = 0 ] || return 0
  nft delete table inet "$NG_TABLE" 2>/dev/null || true
  ip route flush table local proto "$NG_PROTO" 2>/dev/null || true
  ip route flush proto "$NG_PROTO" 2>/dev/null || true
  ip -6 route flush proto "$NG_PROTO" 2>/dev/null || true
  [ "${1:-}" = quiet ] || ngsay "down"
}

# One guard per machine, shared: `make up` of any clone and `make kubeadm-up` each hold it
# (a file naming a directory of theirs that exists while they run), and the last to let go
# removes it. A holder whose directory is gone (a crashed run's, wiped) no longer counts.
NG_HOLDERS=/run/kcm-split-netguard.holders
# Taken (flock) around a hold and the guard's setup, and around a release and the guard's
# removal: one run's release can otherwise see no holder and remove the guard another run has
# just set up and is about to hold.
NG_LOCK=/run/kcm-split-netguard.lock

# netguard_hold DIR: DIR's cluster uses the guard.
netguard_hold() {
  [ "$(id -u)" = 0 ] || return 0
  mkdir -p "$NG_HOLDERS"
  echo "$1" >"$NG_HOLDERS/$(printf '%s' "$1" | md5sum | cut -c1-16)"
}

# netguard_release DIR: DIR's cluster no longer uses the guard. Returns 0 when nobody else
# does (the caller removes it), 1 naming those who still do.
netguard_release() {
  [ "$(id -u)" = 0 ] || return 0
  local f dir others=()
  rm -f "$NG_HOLDERS/$(printf '%s' "$1" | md5sum | cut -c1-16)"
  for f in "$NG_HOLDERS"/*; do
    [ -e "$f" ] || continue
    read -r dir <"$f" || dir=""
    if [ -n "$dir" ] && [ -d "$dir" ]; then others+=("$dir"); else rm -f "$f"; fi
  done
  [ ${#others[@]} -eq 0 ] && return 0
  ngsay "kept: still used by ${others[*]}"
  return 1
}

# netguard_hold_up DIR: holds the guard for DIR's cluster, then sets it up (netguard_up), under
# NG_LOCK; if the setup fails, the hold is dropped again and it returns 1.
netguard_hold_up() {
  [ "$(id -u)" = 0 ] || { netguard_up; return; }
  mkdir -p "$(dirname "$NG_LOCK")"
  (
    flock 7 || exit 1
    netguard_hold "$1"
    netguard_up || { rm -f "$NG_HOLDERS/$(printf '%s' "$1" | md5sum | cut -c1-16)"; exit 1; }
  ) 7>"$NG_LOCK"
}

# netguard_release_down DIR [quiet]: releases DIR's hold and, when nobody else holds the guard,
# removes it (netguard_down), under NG_LOCK.
netguard_release_down() {
  [ "$(id -u)" = 0 ] || return 0
  mkdir -p "$(dirname "$NG_LOCK")"
  (
    flock 7 || exit 1
    if netguard_release "$1"; then netguard_down ${2:+"$2"}; fi
  ) 7>"$NG_LOCK"
}

# netguard_leftovers prints what the guard left; returns 1 if anything.
netguard_leftovers() {
  local out
  out=$( { nft list table inet "$NG_TABLE" 2>/dev/null | head -1; ip route show table all proto "$NG_PROTO" 2>/dev/null; ip -6 route show table all proto "$NG_PROTO" 2>/dev/null; } || true)
  [ -z "$out" ] || { echo "leftover netguard: $out"; return 1; }
}
