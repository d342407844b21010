#!/usr/bin/env bash
# make conformance: upstream's own e2e specs for the controllers kcm-split replaces, run with
# e2e.test v1.36.3 against `make up` (kube-controller-manager with those controllers off,
# kcm-split's binaries on), then one line per spec: passed, failed or skipped. Not part of
# `make test` (it takes tens of minutes); a failure here is a parity difference to look at.
#   FOCUS=<regexp>  which specs (default: the ones below)
#   SKIP=<regexp>   specs left out (default: those needing a data plane, a cloud or real disks)
#   KEEP_UP=1       leave the control plane running afterwards (default: make down if this
#                   script started it)
#   UPSTREAM=1      the baseline: a fresh `make up` whose kube-controller-manager runs every
#                   controller itself, no kcm-split binary
#   NODE=1          the data-plane specs on a real node (root): a fresh `make up` plus
#                   `make node-up` with the images of `make images` (agnhost and pause tagged as
#                   e2e.test names them), the kwok nodes tainted NoSchedule so that every test
#                   Pod runs on the real node behind kube-proxy; default FOCUS then every
#                   EndpointSlice and EndpointSliceMirroring spec (seven: the three the
#                   default run skips exec `sh -c "curl ..."` into an agnhost Pod, whose
#                   image has Debian's busybox, curl and nc for it); FOCUS_NODE / SKIP_NODE
#                   override those (the Services [Conformance] specs, for instance, partly
#                   need a cluster DNS, which make up has not)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$root/bin
out=$root/.local/conformance
cd "$root"

# Specs of the replaced controllers that need neither a data plane nor a cloud: ResourceQuota
# (quota), Namespaces and OrderedNamespaceDeletion (namespace), EndpointSlice and
# EndpointSliceMirroring (the endpoints family), NoExecuteTaintManager and Node Lifecycle
# (nodelifecycle). Not "[sig-network] API Server should have Endpoints and EndpointSlices
# pointing to API Server": those are the apiserver's own, and make up runs it with
# --endpoint-reconciler-type=none (deploy/local/README.md), so it fails whoever the controllers are.
FOCUS=${FOCUS:-'\[sig-api-machinery\] ResourceQuota|\[sig-api-machinery\] Namespaces|OrderedNamespaceDeletion|\[sig-network\] EndpointSlice |\[sig-network\] EndpointSliceMirroring |\[sig-node\] NoExecuteTaintManager|\[sig-node\] Node Lifecycle'}
# kwok's Pods run no containers: specs that exec into Pods, send traffic or need a cloud, real
# volumes or a second scheduler cannot pass on it whoever the controller is.
# The two EndpointSlice specs and the EndpointSliceMirroring one named here exec into a Pod and
# curl the Service (a data plane).
SKIP=${SKIP:-'\[Flaky\]|\[Feature:|\[Slow\]|should verify ResourceQuota with terminating scopes through scope selectors|should verify ResourceQuota with best effort scope|multiple endpoint IPs specified in multiple EndpointSlices|multiple ports specified in multiple EndpointSlices|should mirror a custom Endpoint with multiple subsets and same IP address'}

if [ "${NODE:-}" = 1 ]; then
  FOCUS=${FOCUS_NODE:-'\[sig-network\] EndpointSlice |\[sig-network\] EndpointSliceMirroring '}
  SKIP=${SKIP_NODE:-'\[Flaky\]|\[Feature:|\[Slow\]|\[Disruptive\]|\[Serial\]'}
fi

K8S_VERSION=v1.36.3
# e2e.test v1.36.3 (deploy/tools/build.sh builds it once into bin/).
TOOLS_ONLY=e2e.test bash deploy/tools/build.sh "$bin"

started=0
extra=()
kubeconfig=$root/.local/kubeconfig
if [ "${NODE:-}" = 1 ] || [ "${UPSTREAM:-}" = 1 ] || ! { [ -f "$kubeconfig" ] && "$bin/kubectl" --kubeconfig "$kubeconfig" get --raw=/readyz >/dev/null 2>&1; }; then
  make down >/dev/null 2>&1 || true
  make up
  started=1
fi
if [ "${NODE:-}" = 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "conformance: NODE=1 runs a real kubelet: run as root" >&2; exit 1; }
  # The node's images only (pause, agnhost, the nginx stand-in): the controllers run as make
  # up's processes, so their images (two platforms each) would be built for nothing.
  make images IMAGES_FLAGS=-only=pause,agnhost,nginx
  make node-up
  # e2e.test asks for upstream's image names; nothing can be pulled, so the same images of
  # make images are tagged with those names on the node.
  (
    # shellcheck source=deploy/local/lib.sh
    source deploy/local/lib.sh
    # shellcheck source=deploy/local/node.sh
    source deploy/local/node.sh
    agnhost=$(nctr images ls -q | grep '/agnhost:' | head -n1 || true)
    [ -n "$agnhost" ] || { echo "conformance: no agnhost image on the node (make images)" >&2; exit 1; }
    want_agnhost=$(grep -o '"agnhost", "[^"]*"' "$(cd deploy/tools && GOWORK=off go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/test/utils/image/manifest.go" | sed -n 's/.*"agnhost", "\(2\.[0-9.]*\)"/\1/p' | sort -V | tail -n1)
    want=registry.k8s.io/e2e-test-images/agnhost:$want_agnhost
    [ "$agnhost" = "$want" ] || nctr images tag --force "$agnhost" "$want" >/dev/null
    nctr images ls -q | grep -x 'registry.k8s.io/pause:3.10.2' >/dev/null ||
      nctr images tag --force "$NODE_SANDBOX_IMAGE" registry.k8s.io/pause:3.10.2 >/dev/null
    echo "conformance: $agnhost tagged registry.k8s.io/e2e-test-images/agnhost:$want_agnhost on the node"
  )
  "$bin/kubectl" --kubeconfig "$root/.local/kubeconfig" taint nodes -l type=kwok kcm-split.io/kwok=:NoSchedule --overwrite >/dev/null
  # The framework waits for every node to be schedulable unless its taint is non-blocking.
  extra+=("--non-blocking-taints=kcm-split.io/kwok,node-role.kubernetes.io/control-plane")
fi
finish() {
  local rc=$?
  # shellcheck source=deploy/local/lib.sh
  (source deploy/local/lib.sh && netguard_verdict conformance) || rc=1
  if [ "$started" = 1 ] && [ "${KEEP_UP:-}" != 1 ]; then make down >/dev/null 2>&1 || true; fi
  exit "$rc"
}
trap finish EXIT

rm -rf "$out" && mkdir -p "$out"
echo "conformance: focus $FOCUS"
set +e
"$bin/e2e.test" --kubeconfig="$kubeconfig" --provider=skeleton \
  --ginkgo.focus="$FOCUS" --ginkgo.skip="$SKIP" --ginkgo.no-color --ginkgo.timeout=2h \
  --ginkgo.json-report="$out/report.json" --report-dir="$out" \
  --allowed-not-ready-nodes=0 --minStartupPods=0 --kubectl-path="$bin/kubectl" ${extra[@]+"${extra[@]}"} >"$out/e2e.log" 2>&1
rc=$?
set -e
(cd deploy/tools && GOWORK=off go run ./e2esummary "$out/report.json") | tee "$out/summary.txt"
echo "conformance: e2e.test exited $rc; log $out/e2e.log"
exit $rc
