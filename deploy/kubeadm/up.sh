#!/usr/bin/env bash
# make kubeadm-up: a one-node kubeadm v1.36.3 cluster on this machine (root): containerd, the
# kubelet played by kubelet-service.sh, `kubeadm init` from one config file (its every phase:
# certificates, kubeconfigs, etcd and the control plane as static Pods, the kubelet's config,
# bootstrap tokens, CoreDNS and kube-proxy as addons), the node untainted. kubeadm's images and
# the controllers' are imported first (make kubeadm-images, make images). `make kubeadm-down`
# removes it and all it put on the machine. See deploy/kubeadm/README.md.
# Usage: deploy/kubeadm/up.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../local/lib.sh
source "$here/../local/lib.sh"
# shellcheck source=../local/node.sh
source "$here/../local/node.sh"
# shellcheck source=kubeadm.sh
source "$here/kubeadm.sh"

[ "$(id -u)" = 0 ] || kdie "a kubeadm cluster needs root (containerd, /etc/kubernetes, iptables)"
mkdir -p "$LOGS"
exec 8>"$LOCAL/kubeadm.lock"
flock -n 8 || kdie "another kubeadm-up or kubeadm-down runs (lock: $LOCAL/kubeadm.lock)"
ka_recorded && kdie "a kubeadm cluster is recorded in $KA_DIR: 'make kubeadm-down' first"
# kubeadm looks for the kubelet on PATH (its version check).
export PATH=$BIN:$PATH
for b in kubeadm kubelet kubectl; do [ -x "$BIN/$b" ] || kdie "$BIN/$b missing: make tools"; done
[ ! -e /etc/kubernetes/manifests/kube-apiserver.yaml ] ||
  kdie "/etc/kubernetes/manifests already holds a control plane (another kubeadm cluster?): 'make kubeadm-down' or 'kubeadm reset'"

ok=""
on_exit() {
  if [ -z "$ok" ]; then
    ksay "kubeadm-up failed: tearing down what was started; logs in $LOGS/kubeadm-*.log"
    bash "$here/down.sh" || true
  fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

start=$SECONDS
# Before anything is made: a failure here must not tear down the other node.
node_claim "$NODE_DIR" "make kubeadm-up"
mkdir -p "$NODE_RUN" "$KA_DIR"
touch "$KA_DIR/up" "$NODE_DIR/up"
node_packages
: >"$NODE_DIR/sysctl.saved"
for s in "${NODE_SYSCTLS[@]}"; do
  if v=$(sysctl -n "$s" 2>/dev/null); then echo "$s=$v" >>"$NODE_DIR/sysctl.saved"; fi
done
# kubeadm's preflight requires forwarding (Pods on the bridge reach the node IP).
sysctl -qw net.ipv4.ip_forward=1

netguard_hold_up "$KA_DIR" || kdie "the network guard could not be set up (above)"
if [[ "$(ip -o addr show dev lo)" != *" $NODE_IP/32 "* ]]; then ip addr add "$NODE_IP/32" dev lo; fi
echo "nameserver $KA_UPSTREAM_DNS" >"$KA_DIR/resolv.conf"

ksay "starting containerd ($CONTAINERD_SOCK)"
node_containerd_config
node_launch containerd "$(command -v containerd)" --config "$NODE_DIR/containerd.toml"
node_wait containerd 30 "its socket" ctr --address "$CONTAINERD_SOCK" version
ka_import_images

# The Pods' network: kubeadm gives the node no CNI; the whole Pod range is this node's.
node_cni_config "$POD_CIDR"

ka_audit_policy
ka_config
ksay "starting the kubelet service (deploy/kubeadm/kubelet-service.sh), then kubeadm init"
ka_kubelet_service
kadm init --config "$KA_CONFIG" -v=1 >"$LOGS/kubeadm-init.log" 2>&1 ||
  kdie "kubeadm init failed: $LOGS/kubeadm-init.log: $(grep -E 'error|ERROR' "$LOGS/kubeadm-init.log" | tail -3)"
install -m 600 /etc/kubernetes/admin.conf "$KA_ADMIN"
ksay "kubeadm init done in $((SECONDS - start))s; waiting for the node and kube-system"
ka_wait_ready
ok=1
ksay "ready in $((SECONDS - start))s: export KUBECONFIG=$KA_ADMIN"
kk -n kube-system get pods -o wide
