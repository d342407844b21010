#!/usr/bin/env bash
# make kubeadm-down: removes the cluster of `make kubeadm-up` and all it put on the machine, in
# the order that leaves nothing behind: Pods off the node (the kubelet runs CNI DEL and
# unmounts), the kubelet, `kubeadm reset` (its files, etcd's data), containerd's containers
# and images, the CNI bridge, iptables, the node IP, the network guard. Safe to run twice.
# Usage: deploy/kubeadm/down.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../local/lib.sh
source "$here/../local/lib.sh"
# shellcheck source=../local/node.sh
source "$here/../local/node.sh"
# shellcheck source=kubeadm.sh
source "$here/kubeadm.sh"

[ "$(id -u)" = 0 ] || kdie "needs root"
if ! ka_recorded; then ksay "no kubeadm cluster recorded in $KA_DIR"; exit 0; fi
mkdir -p "$LOGS"
start=$SECONDS
if node_alive kubelet-service; then ka_drain; ksay "drained in $((SECONDS - start))s"; fi
node_stop kubelet-service
if [ -x "$BIN/kubeadm" ]; then
  kadm reset -f --cri-socket "unix://$CONTAINERD_SOCK" >"$LOGS/kubeadm-reset.log" 2>&1 ||
    kwarn "kubeadm reset failed: $LOGS/kubeadm-reset.log"
fi
# kubeadm reset leaves the upgrade's backups (/etc/kubernetes/tmp) behind.
rm -rf /etc/kubernetes/kcm-split-audit.yaml /etc/kubernetes/tmp
# The audit log goes with the logs of this run.
if [ -d /var/log/kubernetes/audit ]; then
  rm -rf "$LOGS/kubeadm-audit" && mv /var/log/kubernetes/audit "$LOGS/kubeadm-audit"
  rmdir /var/log/kubernetes 2>/dev/null || true
fi
# node_down's remaining steps: kube-proxy's rules, containerd, links, mounts, node IP, sysctls,
# cgroups. Its drain and API cleanup are skipped (no ports.env here).
node_down
rm -rf "$KA_DIR"
if netguard_active; then
  netguard_verdict kubeadm || true
  # A make-up cluster of any clone keeps the guard it uses.
  netguard_release_down "$KA_DIR" || true
fi
ksay "torn down in $((SECONDS - start))s"
