#!/usr/bin/env bash
# make kubeadm-e2e: the move from kube-controller-manager to kcm-split on a real kubeadm
# v1.36.3 cluster, by the chart README's kubeadm runbook, its command blocks run as written.
#   1. builds what it needs: the tools (kubeadm, kubelet...), kubeadm's images, the controllers'
#      images from the current code (make images, the node's platform only), kcm-split-plan,
#   2. make kubeadm-up with a few tuned KCM flags in the ClusterConfiguration (KA_KCM_ARGS), which
#      the plan must carry over to the binaries,
#   3. runs deploy/tests/kubeadm (go test, KCM_SPLIT_KUBEADM_E2E=1): the runbook's steps under the
#      migration drill's churn, `kubeadm upgrade apply` at the same version, KCM's container killed
#      (its controllers still off), the trap and its fix, the rollback; who wrote what from the
#      apiserver's audit log; the chart's alerts evaluated by a real Prometheus,
#   4. always: the network guard's verdict, make kubeadm-down.
# Holds the machine-wide lock of the real node for the whole run. Needs root. The log is
# .test-logs/kubeadm-e2e.log, the runbook's files and the Pods' logs .test-logs/kubeadm-e2e-work/;
# the last line printed is the test's figures.
# Usage: deploy/tests/kubeadm/e2e.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=deploy/local/lib.sh
source "$root/deploy/local/lib.sh"
cd "$root"

as_root "kubeadm-e2e runs kubeadm, a real kubelet and containerd" "$@"
logs=$root/.test-logs
log=$logs/kubeadm-e2e.log
work=$logs/kubeadm-e2e-work
mkdir -p "$logs"
rm -rf "$log" "$work"
exec > >(tee "$log") 2>&1
teepid=$!
start=$SECONDS
lock=/tmp/kcm-split-node.lock
exec 9>"$lock"
flock -w 3600 9 || die "kubeadm-e2e: $lock held for an hour"
say "kubeadm-e2e: lock taken after $((SECONDS - start))s"
[ ! -f "$LOCAL/kubeadm/up" ] || die "kubeadm-e2e starts its own cluster: 'make kubeadm-down' first"

say "kubeadm-e2e: building tools, kubeadm's images, the controllers' images and kcm-split-plan"
bash deploy/tools/build.sh "$BIN"
make -s kubeadm-images >/dev/null
tag=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
t=$SECONDS
make -s images VERSION="$tag" IMAGES_FLAGS="-platforms linux/$(go env GOARCH)"
say "kubeadm-e2e: make images (the current code, tag $tag) took $((SECONDS - t))s"
make -s plan
built=$((SECONDS - start))

# KCM flags an operator may have tuned: the plan must carry each to its binary (the test checks
# the values and the Deployments). The node lifecycle's grace period also paces the churn.
export KA_KCM_ARGS="node-monitor-grace-period=30s node-monitor-period=2s pvclaimbinder-sync-period=10s concurrent-namespace-syncs=4 concurrent-endpoint-syncs=4 resource-quota-sync-period=2m"

rc=0
finish() {
  local code=$?
  set +e
  [ "$code" = 0 ] || rc=1
  netguard_verdict kubeadm-e2e || rc=1
  say "kubeadm-e2e: make kubeadm-down"
  bash deploy/kubeadm/down.sh
  if [ "$rc" = 0 ]; then
    say "kubeadm-e2e: PASS in $((SECONDS - start))s (building ${built}s; log $log)"
  else
    warn "kubeadm-e2e: FAIL after $((SECONDS - start))s (log $log; work $work; cluster logs $LOGS)"
  fi
  grep -h '^kubeadm-e2e: takeover_gap_max_s=' "$log" | tail -1
  # Everything printed: let tee finish before make prints its verdict.
  exec >&- 2>&-
  wait "$teepid" 2>/dev/null
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

bash deploy/kubeadm/up.sh
say "kubeadm-e2e: cluster up ($((SECONDS - start))s)"
export KUBECONFIG=$LOCAL/kubeadm/admin.conf PATH=$BIN:$PATH
(cd deploy/tests/kubeadm && KCM_SPLIT_KUBEADM_E2E=1 KCM_SPLIT_KUBEADM_E2E_IMAGE_TAG="$tag" KCM_SPLIT_KUBEADM_E2E_WORK="$work" \
  KCM_SPLIT_KUBEADM_E2E_CONTAINERD="$LOCAL/kubeadm/node/containerd.sock" \
  go test -count=1 -v -timeout 40m -run '^TestKubeadmE2E$' .) || rc=1
