#!/usr/bin/env bash
# make lb-e2e: LoadBalancer addresses proven by real traffic, on a real node.
#   1. builds what it needs: the tools, MetalLB v0.15.2's controller and speaker from the Go
#      module proxy (deploy/tools/metallb), the images (make images -metallb: speaker, MetalLB's
#      controller, agnhost, service-lb...), the controllers,
#   2. make up, then make node-up (root), the host-run service-lb-controller stopped (the
#      controller under test is the only one that hands addresses out),
#   3. MetalLB's CRDs and RBAC, applied from its module as they ship (kustomize, namespace
#      metallb-system),
#   4. runs deploy/tests/lb (go test, KCM_SPLIT_LB_E2E=1) once per controller in
#      LB_E2E_CONTROLLERS (default "metallb service-lb"): MetalLB's speaker in L2 mode, a client
#      in its own network namespace on a veth in 198.18.100.0/24; a Service answers, the controller
#      Pod deleted under traffic, a Service deleted and its address reused, 20 Services timed,
#   5. always: MetalLB's objects deleted, make down, and a check that nothing is left behind.
# FIGURE lines are printed and kept in .test-logs/lb-e2e.log. Needs root.
# Usage: deploy/tests/lb/e2e.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=deploy/local/lib.sh
source "$root/deploy/local/lib.sh"
# shellcheck source=deploy/local/node.sh
source "$root/deploy/local/node.sh"
cd "$root"

as_root "lb-e2e runs a real kubelet, containerd and network namespaces" "$@"
[ -z "$(recorded)" ] || die "lb-e2e starts its own cluster: 'make down' first"
node_recorded && die "a real node is recorded in $NODE_DIR: 'make down' first"
ip netns list | grep -qw kcm-lbe2e && die "network namespace kcm-lbe2e exists (a previous run?): ip netns del kcm-lbe2e"
[ -z "$(ip -4 -o addr show to 198.18.100.0/24)" ] || die "198.18.100.0/24, the test's link, is in use on this machine"
export KCM_SPLIT_BIN_DIR=$BIN
controllers=${LB_E2E_CONTROLLERS:-metallb service-lb}
logs=$root/.test-logs
mkdir -p "$logs"
log=$logs/lb-e2e.log
rm -f "$log"
start=$SECONDS

say "lb-e2e: building tools, MetalLB v0.15.2, images and controllers"
bash deploy/tools/build.sh "$BIN"
TOOLS_ONLY="metallb-controller metallb-speaker" bash deploy/tools/build.sh "$BIN"
make -s images IMAGES_FLAGS="-platforms linux/$(go env GOARCH) -metallb $BIN"
make -s build >/dev/null
built=$((SECONDS - start))

mlmod=$(cd deploy/tools/metallb && GOWORK=off go list -m -f '{{.Dir}}' go.universe.tf/metallb)
[ -d "$mlmod/config/rbac" ] || die "MetalLB's module has no config/rbac at $mlmod"
kdir=$(mktemp -d)
result=1
finish() {
  local rc=$?
  set +e
  if [ -f "$kdir/kustomization.yaml" ] && [ -f "$RUN/ports.env" ]; then
    "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" delete -k "$kdir" --ignore-not-found --wait --timeout=60s >/dev/null
  fi
  rm -rf "$kdir"
  netguard_verdict lb-e2e || rc=1
  say "lb-e2e: make down"
  bash deploy/local/down.sh
  local left=0
  node_leftovers || left=1
  netguard_leftovers || left=1
  if ip netns list | grep -qw kcm-lbe2e; then echo "leftover network namespace kcm-lbe2e"; left=1; fi
  if ip -o link show kcmlb0 >/dev/null 2>&1; then echo "leftover link kcmlb0"; left=1; fi
  if [ -n "$(ip -4 -o addr show to 198.18.100.0/24)" ]; then echo "leftover 198.18.100.x address: $(ip -4 -o addr show to 198.18.100.0/24)"; left=1; fi
  if [ "$left" = 1 ]; then
    warn "lb-e2e: the above was left behind"
    rc=1
  else
    say "lb-e2e: nothing left behind (client netns and veth, node netns, mounts, KUBE-/CNI- chains, node IP, processes)"
  fi
  [ "$result" = 0 ] || rc=1
  grep -h '^FIGURE' "$log" 2>/dev/null | sort -u | sed 's/^/lb-e2e: /'
  if [ "$rc" = 0 ]; then
    say "lb-e2e: PASS in $((SECONDS - start))s (building ${built}s; log $log)"
  else
    warn "lb-e2e: FAIL after $((SECONDS - start))s (log $log; cluster logs $LOGS)"
  fi
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

bash deploy/local/up.sh >/dev/null
say "lb-e2e: control plane up ($((SECONDS - start))s)"
bash deploy/local/node-up.sh
# shellcheck source=/dev/null
source "$RUN/ports.env"
say "lb-e2e: stopping the host-run service-lb-controller (the controller under test hands addresses out alone)"
stop_group service-lb-controller

# MetalLB's CRDs and RBAC as its module ships them, in its namespace.
mkdir -p "$kdir/crds"
cp "$mlmod"/config/crd/bases/*.yaml "$kdir/crds/"
cp -r "$mlmod/config/rbac" "$kdir/rbac"
chmod -R u+w "$kdir"
cat >"$kdir/ns.yaml" <<'YAML'
apiVersion: v1
kind: Namespace
metadata:
  name: metallb-system
YAML
{
  echo "namespace: metallb-system"
  echo "resources:"
  echo "- ns.yaml"
  for f in "$kdir"/crds/*.yaml; do echo "- crds/$(basename "$f")"; done
  echo "- rbac"
} >"$kdir/kustomization.yaml"
"$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" apply --server-side -k "$kdir" >/dev/null
"$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" wait --for=condition=Established crd --all --timeout=60s >/dev/null

speaker=$(nctr images ls -q | grep -m1 '/metallb/speaker:' || true)
mlctrl=$(nctr images ls -q | grep -m1 '/metallb/controller:' || true)
workload=$(nctr images ls -q | grep -m1 '/agnhost:' || true)
ref=$(nctr images ls -q | grep -m1 '/service-lb-controller:' || true)
[ -n "$speaker" ] && [ -n "$mlctrl" ] && [ -n "$workload" ] && [ -n "$ref" ] ||
  die "images missing on the node (speaker '$speaker', MetalLB controller '$mlctrl', agnhost '$workload', service-lb '$ref'): $LOGS/node-images.log"
say "lb-e2e: ready to test ($((SECONDS - start))s): speaker $speaker, controllers: $controllers"

set +e
(cd deploy/tests/lb && KCM_SPLIT_LB_E2E=1 KUBECONFIG=$KUBECONFIG_FILE KCM_SPLIT_LB_E2E_NODE=$NODE_NAME KCM_SPLIT_LB_E2E_PROXY_METRICS=http://127.0.0.1:$PROXY_METRICS/metrics \
  KCM_SPLIT_LB_E2E_WORKLOAD_IMAGE=$workload KCM_SPLIT_LB_E2E_SPEAKER_IMAGE=$speaker \
  KCM_SPLIT_LB_E2E_METALLB_CONTROLLER_IMAGE=$mlctrl KCM_SPLIT_LB_E2E_CONTROLLERS=${controllers// /,} \
  KCM_SPLIT_LB_E2E_HELM=$BIN/helm KCM_SPLIT_LB_E2E_CHART=$root/charts/kcm-split \
  KCM_SPLIT_LB_E2E_IMAGE_REGISTRY=${ref%/service-lb-controller:*} KCM_SPLIT_LB_E2E_IMAGE_TAG=${ref##*:} \
  GOWORK=off go test -count=1 -v -timeout 30m -run '^TestLBE2E$' .) 2>&1 | tee "$log"
result=${PIPESTATUS[0]}
set -e
