#!/usr/bin/env bash
# make netguard-drill: proves the network guard of netguard.sh (root; about 10 s). Two network
# namespaces this script makes stand for the machine and its default gateway: "host" (a
# default route via the veth to "gw") and "gw", which counts every packet toward the test
# ranges that reaches it. The guard is set up in "host" by the same functions make up uses,
# then one TCP connection to a ClusterIP without any kube-proxy rule is tried, three times:
#   1. guard and routes up:          refused on the host; the guard counts 0; the gateway sees 0
#   2. the Service route removed:    the guard counts it and rejects it; the gateway sees 0
#   3. the guard removed too (control): the gateway sees the packet (so step 2's 0 means something)
# No packet leaves the two namespaces: "gw" has no other link.
# Usage: deploy/local/netguard-drill.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "netguard-drill makes network namespaces: run it as root"
for t in ip nft timeout; do command -v "$t" >/dev/null || die "'$t' is required (Debian: iproute2, nftables, coreutils)"; done
H=kcm-ngd-host G=kcm-ngd-gw
PROBE=$(cut -d. -f1-2 <<<"$SERVICE_CIDR").255.254 # a ClusterIP no Service has (the range is a /16)
mkdir -p "$LOGS"
cleanup() {
  ip netns del "$H" 2>/dev/null || true
  ip netns del "$G" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add "$H"
ip netns add "$G"
ip link add ngd0 netns "$H" type veth peer name ngd1 netns "$G"
ip -n "$H" addr add 169.254.77.2/30 dev ngd0
ip -n "$G" addr add 169.254.77.1/30 dev ngd1
for ns in "$H" "$G"; do ip -n "$ns" link set lo up; done
ip -n "$H" link set ngd0 up
ip -n "$G" link set ngd1 up
ip -n "$H" route add default via 169.254.77.1
ip netns exec "$G" nft -f - <<EOF
add table inet gw
add counter inet gw seen
add chain inet gw in { type filter hook prerouting priority 0; policy accept; }
add rule inet gw in ip daddr $SERVICE_CIDR counter name seen drop
EOF

inhost() { ip netns exec "$H" bash -c "set -euo pipefail; source '$HERE/lib.sh'; $1"; }
seen() { ip netns exec "$G" nft list counter inet gw seen | sed -n 's/.*packets \([0-9]*\).*/\1/p'; }
# probe: one connection to PROBE:80 from "host"; prints how it ended.
probe() {
  local err
  err=$(ip netns exec "$H" timeout 3 bash -c "exec 3<>/dev/tcp/$PROBE/80" 2>&1) && echo connected && return
  case $err in
  *refused*) echo refused ;;
  *unreachable*) echo unreachable ;;
  '') echo "timed out" ;;
  *) echo "$err" | tail -1 ;;
  esac
}

# Two clusters on one guard (a make up and a kubeadm cluster), each holding it as it sets it
# up and releasing it as it would remove it: the first to let go keeps it, the last removes it.
holders=$(mktemp -d) && mkdir -p "$holders/a" "$holders/b"
ng="NG_HOLDERS=$holders/h NG_LOCK=$holders/lock"
inhost "$ng; netguard_hold_up $holders/a; netguard_hold_up $holders/b; netguard_release_down $holders/a quiet" >/dev/null
kept=no; inhost netguard_active && kept=yes
inhost "$ng; netguard_release_down $holders/b quiet" >/dev/null
freed=yes; inhost netguard_active && freed=no
rm -rf "$holders"
# A range holding a package registry's address is refused (localhost stands for one: it
# resolves from /etc/hosts, no DNS needed); one that does not hold it is not.
reg_in=$(NG_REGISTRY_HOSTS=localhost bash -c "source '$HERE/lib.sh'; NG_RANGES_V4=(127.0.0.0/8); NG_RANGES_V6=(); netguard_overlaps" | grep -c 'localhost (a package registry) resolves to 127.0.0.1' || true)
reg_out=$(NG_REGISTRY_HOSTS=localhost bash -c "source '$HERE/lib.sh'; NG_RANGES_V4=(198.18.0.0/15); NG_RANGES_V6=(); netguard_overlaps" | grep -c 'package registry' || true)
echo "netguard-drill: 0. a range holding a registry's address: named $reg_in time(s); a range without: $reg_out"
inhost netguard_up >/dev/null
echo "netguard-drill: 0. two holders: kept after the first let go: $kept; removed after the second: $freed"
got1=$(probe) n1=$(inhost netguard_count) s1=$(seen)
echo "netguard-drill: 1. guard and routes up: $got1; guard counted $n1; gateway saw $s1"
ip -n "$H" route del local "$SERVICE_CIDR" dev lo table local
got2=$(probe) n2=$(inhost netguard_count) s2=$(seen)
echo "netguard-drill: 2. Service route removed: $got2; guard counted $n2; gateway saw $s2"
inhost 'netguard_down quiet'
got3=$(probe) s3=$(seen)
echo "netguard-drill: 3. guard removed (control): $got3; gateway saw $((s3 - s2))"
ok=1
[ "$kept" = yes ] && [ "$freed" = yes ] || { warn "step 0: want the guard kept while a holder remains, removed by the last"; ok=0; }
[ "$reg_in" = 1 ] && [ "$reg_out" = 0 ] || { warn "step 0: want a range holding a registry's address named once, none otherwise"; ok=0; }
[ "$got1" = refused ] && [ "$n1" = 0 ] && [ "$s1" = 0 ] || { warn "step 1: want refused on the host, 0, 0"; ok=0; }
[ "$got2" != connected ] && [ "$n2" -ge 1 ] && [ "$s2" = 0 ] || { warn "step 2: want the guard to count and reject, the gateway to see nothing"; ok=0; }
[ "$((s3 - s2))" -ge 1 ] || { warn "step 3: the gateway saw nothing without the guard: the drill cannot tell"; ok=0; }
inhost 'netguard_leftovers' || ok=0
[ "$ok" = 1 ] || die "netguard-drill: FAIL"
say "netguard-drill: PASS (the guard fires when the local route is missing, and nothing reaches the gateway)"
