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
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
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

K8S_VERSION=v1.36.3
if [ ! -x "$bin/e2e.test" ]; then
  echo "conformance: building e2e.test $K8S_VERSION (tools module; several minutes the first time)"
  pkg=k8s.io/component-base/version
  (cd deploy/tools && GOWORK=off CGO_ENABLED=0 go test -c -trimpath \
    -ldflags "-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=36" \
    -o "$bin/e2e.test.tmp" k8s.io/kubernetes/test/e2e)
  mv "$bin/e2e.test.tmp" "$bin/e2e.test"
fi

started=0
kubeconfig=$root/.local/kubeconfig
if [ "${UPSTREAM:-}" = 1 ] || ! { [ -f "$kubeconfig" ] && "$bin/kubectl" --kubeconfig "$kubeconfig" get --raw=/readyz >/dev/null 2>&1; }; then
  make down >/dev/null 2>&1 || true
  make up
  started=1
fi
finish() {
  if [ "$started" = 1 ] && [ "${KEEP_UP:-}" != 1 ]; then make down >/dev/null 2>&1 || true; fi
}
trap finish EXIT

rm -rf "$out" && mkdir -p "$out"
echo "conformance: focus $FOCUS"
set +e
"$bin/e2e.test" --kubeconfig="$kubeconfig" --provider=skeleton \
  --ginkgo.focus="$FOCUS" --ginkgo.skip="$SKIP" --ginkgo.no-color --ginkgo.timeout=2h \
  --ginkgo.json-report="$out/report.json" --report-dir="$out" \
  --allowed-not-ready-nodes=0 --minStartupPods=0 >"$out/e2e.log" 2>&1
rc=$?
set -e
(cd deploy/tools && GOWORK=off go run ./e2esummary "$out/report.json") | tee "$out/summary.txt"
echo "conformance: e2e.test exited $rc; log $out/e2e.log"
exit $rc
