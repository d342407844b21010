#!/usr/bin/env bash
# End-to-end smoke test of `make up`: bring the local control plane up, run the commands it
# prints (a Deployment of 3 replicas, exposed), and check that its Endpoints list the 3 Pods.
# Stops the control plane again if this script started it. Part of `make test`.
set -euo pipefail
# shellcheck source=deploy/local/lib.sh
source "$(dirname "$0")/lib.sh"

# pid files exist exactly while the control plane is up (down removes them).
started=0
if [ -z "$(recorded)" ]; then started=1; fi
bash "$HERE/up.sh"
cleanup() {
  local rc=$?
  netguard_verdict smoke || rc=1
  if [ "$started" = 1 ]; then bash "$HERE/down.sh"; fi
  exit "$rc"
}
trap cleanup EXIT

k() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
ns=smoke-$RANDOM
k create namespace "$ns" >/dev/null
k -n "$ns" create deployment web --image=nginx --replicas=3 >/dev/null
k -n "$ns" expose deployment web --port=80 >/dev/null

# Pods are scheduled onto the kwok nodes, get IPs and turn Ready; the endpoints controller
# then lists them. Bounded wait; on failure show what there is.
deadline=$((SECONDS + 120))
while :; do
  n=$(k -n "$ns" get endpoints web -o jsonpath='{range .subsets[*].addresses[*]}{.ip}{"\n"}{end}' 2>/dev/null | grep -c . || true)
  if [ "$n" = 3 ]; then break; fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    k -n "$ns" get pods -o wide || true
    k -n "$ns" get endpoints web -o yaml || true
    die "smoke: Endpoints of $ns/web have $n ready addresses after 120s, want 3"
  fi
  sleep 1
done
k -n "$ns" get endpoints web
say "smoke: ok (Deployment web: 3 Pods, 3 ready addresses in its Endpoints)"

# The same Pods in the Service's EndpointSlices, which the data plane reads (endpoints-controller
# writes them; KCM's endpointslice-controller is off).
deadline=$((SECONDS + 60))
while :; do
  n=$(k -n "$ns" get endpointslices -l kubernetes.io/service-name=web \
    -o jsonpath='{range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]}{"\n"}{end}' 2>/dev/null | grep -c . || true)
  if [ "$n" = 3 ]; then break; fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    k -n "$ns" get endpointslices -l kubernetes.io/service-name=web -o yaml || true
    die "smoke: EndpointSlices of $ns/web have $n ready endpoints after 60s, want 3"
  fi
  sleep 1
done
k -n "$ns" get endpointslices -l kubernetes.io/service-name=web
say "smoke: ok (3 ready endpoints in the Service's EndpointSlices)"

# Custom Endpoints of a Service without a selector are mirrored into an EndpointSlice
# (endpoints-controller's endpointslice-mirroring-controller; KCM's is off).
k -n "$ns" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: ext}
spec: {ports: [{name: db, port: 5432}]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: ext}
subsets: [{addresses: [{ip: 192.0.2.5}], ports: [{name: db, port: 5432}]}]
YAML
mirrored='kubernetes.io/service-name=ext,endpointslice.kubernetes.io/managed-by=endpointslicemirroring-controller.k8s.io'
deadline=$((SECONDS + 60))
until [ "$(k -n "$ns" get endpointslices -l "$mirrored" -o jsonpath='{.items[*].endpoints[*].addresses[0]}' 2>/dev/null)" = 192.0.2.5 ]; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    k -n "$ns" get endpointslices -o yaml || true
    die "smoke: the custom Endpoints of $ns/ext were not mirrored into an EndpointSlice within 60s"
  fi
  sleep 1
done
k -n "$ns" get endpointslices -l "$mirrored"
say "smoke: ok (custom Endpoints of a Service without a selector mirrored into an EndpointSlice)"

# shellcheck source=/dev/null
source "$RUN/ports.env"
# nodelifecycle-controller's node IPAM gave every kwok node an IPv4 and an IPv6 Pod range from
# the documentation ranges, and kwok took the Pods' IPs from them.
if [[ " $CONTROLLER_PORTS" == *" nodelifecycle-controller="* ]]; then
  ranges=$(k get nodes -l type=kwok -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDRs[*]}{"\n"}{end}')
  echo "$ranges"
  while read -r node v4 v6 extra; do
    [[ "$v4" == 198.51.100.*/26 && "$v6" == 2001:db8:100:*/64 && -z "$extra" ]] ||
      die "smoke: node $node has Pod ranges '$v4 $v6 $extra', want a /26 of 198.51.100.0/24 and a /64 of 2001:db8:100::/56"
  done <<<"$ranges"
  [ "$(sort -u <<<"$(cut -d' ' -f2 <<<"$ranges")" | wc -l)" = 3 ] || die "smoke: kwok nodes share a Pod range"
  ips=$(k -n "$ns" get endpoints web -o jsonpath='{range .subsets[*].addresses[*]}{.ip}{"\n"}{end}')
  if grep -qv '^198\.51\.100\.' <<<"$ips"; then die "smoke: Pod IPs $ips are not from the nodes' ranges"; fi
  say "smoke: ok (node IPAM: each kwok node has its own /26 and /64; Pod IPs come from them)"
fi

# Every controller serves its metrics over HTTPS to authorized tokens only (the hint up.sh
# prints): none gets 401, the namespace's default ServiceAccount bound to system:monitoring 200.
k -n "$ns" create serviceaccount scraper >/dev/null
k create clusterrolebinding "$ns-scrape" --clusterrole=system:monitoring --serviceaccount="$ns:scraper" >/dev/null
token=$(k -n "$ns" create token scraper)
for entry in $CONTROLLER_PORTS; do
  url="https://127.0.0.1:${entry#*=}/metrics"
  code=$(curl -sk -o /dev/null -w '%{http_code}' "$url")
  [ "$code" = 401 ] || die "smoke: ${entry%=*} $url without a token answered $code, want 401"
  # Read the whole body first: grep -q quitting early would fail curl under pipefail.
  # (NUL bytes dropped: upstream's zone label joins region and zone with one.)
  body=$(curl -fsSk -H "Authorization: Bearer $token" "$url" | tr -d '\0') ||
    die "smoke: ${entry%=*} $url refused an authorized token"
  grep -q '^workqueue_adds_total' <<<"$body" ||
    die "smoke: ${entry%=*} $url did not serve its metrics to an authorized token"
done
k delete clusterrolebinding "$ns-scrape" >/dev/null
say "smoke: ok (metrics over HTTPS: 401 without a token, served to a system:monitoring token)"
k delete namespace "$ns" --wait=false >/dev/null
