#!/usr/bin/env bash
# make chart-e2e: the chart end to end on a real node, as an operator would use it.
#   1. builds what it needs (make tools: kubelet, kube-proxy...; make images; make build),
#   2. make up, then make node-up (a real kubelet beside kwok's nodes; needs root),
#   3. stops the host-run copies of the controllers the chart will run (endpoints, namespace,
#      quota): two copies under different owners would act on the same objects,
#   4. retags the controller images on the node (<tag> -> <tag>-next) for the upgrade step,
#   5. runs deploy/tests/chart/e2e (go test, KCM_SPLIT_CHART_E2E=1): install, Ready, Leases,
#      metrics, the controllers' work, upgrade adding quota, helm test (passing, then failing on a
#      controller scaled to 0, then passing again), scale, upgrade of one controller,
#      leader Pod deleted, uninstall; then TestChartShardsE2E (e2e/shards_test.go): endpoints in
#      2 shards, helm upgrade to 4 and back to 1, the layout rule checked from a Lease watch,
#   6. always: make down (the node drained and removed first) and a check that nothing is left
#      behind (network namespaces, veths, mounts under .local, iptables chains, the node IP).
# FIGURE lines (install to Ready, handover on upgrade, takeover) are printed and kept in
# .test-logs/chart-e2e.log; the chart Pods' logs in .test-logs/chart-e2e-pods/. Refuses to run over a `make up` that is already running.
# Usage: deploy/tests/chart/e2e.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=deploy/local/lib.sh
source "$root/deploy/local/lib.sh"
# shellcheck source=deploy/local/node.sh
source "$root/deploy/local/node.sh"
cd "$root"

as_root "chart-e2e runs a real kubelet and containerd" "$@"
[ -z "$(recorded)" ] || die "chart-e2e starts its own cluster: 'make down' first"
node_recorded && die "a real node is recorded in $NODE_DIR: 'make down' first"
export KCM_SPLIT_BIN_DIR=$BIN
logs=$root/.test-logs
mkdir -p "$logs"
log=$logs/chart-e2e.log
rm -f "$log"
# The chart Pods' logs (followed by the test before each leader goes away).
podlogs=$logs/chart-e2e-pods
rm -rf "$podlogs" && mkdir -p "$podlogs"
start=$SECONDS

say "chart-e2e: building tools, images and controllers"
bash deploy/tools/build.sh "$BIN"
make -n images >/dev/null 2>&1 || die "no 'make images' target: the chart's images cannot be built"
# Only the node's platform: the test runs the images, the other platform would only cost time.
make -s images IMAGES_FLAGS="-platforms linux/$(go env GOARCH)"
make -s build >/dev/null

result=1
finish() {
  local rc=$?
  set +e
  netguard_verdict chart-e2e || rc=1
  say "chart-e2e: make down"
  bash deploy/local/down.sh
  if ! node_leftovers || ! netguard_leftovers; then
    warn "chart-e2e: the node left the above behind"
    rc=1
  else
    say "chart-e2e: nothing left behind (no netns, veth, bridge, mount under .local, KUBE-/CNI- chain, node IP, process)"
  fi
  [ "$result" = 0 ] || rc=1
  grep -h '^FIGURE' "$log" 2>/dev/null | sed 's/^/chart-e2e: /'
  if [ "$rc" = 0 ]; then
    say "chart-e2e: PASS in $((SECONDS - start))s (log $log)"
  else
    warn "chart-e2e: FAIL after $((SECONDS - start))s (log $log; cluster logs $LOGS)"
  fi
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

bash deploy/local/up.sh >/dev/null
say "chart-e2e: control plane up ($((SECONDS - start))s)"
bash deploy/local/node-up.sh
# shellcheck source=/dev/null
source "$RUN/ports.env"

# The host-run binaries of the controllers the chart runs now and later (quota) stop first;
# each releases its Lease on SIGTERM.
say "chart-e2e: stopping the host-run endpoints, namespace and quota controllers"
stop_group endpoints-controller namespace-controller quota-controller

# Images: what make images named them, found on the node; the same images under a second tag.
ref=$(nctr images ls -q | grep -m1 '/endpoints-controller:' || true)
[ -n "$ref" ] || die "no endpoints-controller image on the node (make images; $LOGS/node-images.log)"
registry=${ref%/endpoints-controller:*}
tag=${ref##*:}
tag2=$tag-next
for b in endpoints-controller namespace-controller quota-controller; do
  nctr images tag "$registry/$b:$tag" "$registry/$b:$tag2" >/dev/null || die "no image $registry/$b:$tag on the node"
done
# A workload whose containers run until stopped: agnhost's netexec when make images built it.
workload=$(nctr images ls -q | grep -m1 '/agnhost:' || true)
workload_args="netexec --http-port=8080"
if [ -z "$workload" ]; then
  workload=$NODE_SANDBOX_IMAGE workload_args=""
fi
say "chart-e2e: images $registry/<binary>:$tag and :$tag2; workload $workload"

set +e
(cd deploy/tests/chart && KCM_SPLIT_CHART_E2E=1 KUBECONFIG=$KUBECONFIG_FILE \
  KCM_SPLIT_E2E_IMAGE_REGISTRY=$registry KCM_SPLIT_E2E_IMAGE_TAG=$tag KCM_SPLIT_E2E_IMAGE_TAG2=$tag2 \
  KCM_SPLIT_E2E_NODE=$NODE_NAME KCM_SPLIT_E2E_PROXY_METRICS=http://127.0.0.1:$PROXY_METRICS/metrics KCM_SPLIT_E2E_LOG_DIR=$podlogs KCM_SPLIT_E2E_WORKLOAD_IMAGE=$workload KCM_SPLIT_E2E_WORKLOAD_ARGS=$workload_args \
  go test -count=1 -v -timeout 30m -run '^(TestChartE2E|TestChartShardsE2E)$' ./e2e/) 2>&1 | tee "$log"
result=${PIPESTATUS[0]}
set -e
