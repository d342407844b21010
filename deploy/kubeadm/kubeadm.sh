# shellcheck shell=bash
# A kubeadm v1.36.3 cluster of one node on this machine: kubeadm's own phases, its static Pods
# run by the real kubelet, CoreDNS and kube-proxy as its addons, every image built here
# (make kubeadm-images). Sourced by up.sh, down.sh and the kubeadm e2e after deploy/local's
# lib.sh and node.sh (whose containerd, CNI and teardown pieces it reuses with its own
# directory). Callers set -euo pipefail. Needs root.
#
# kubeadm writes where it always does (/etc/kubernetes, /var/lib/kubelet, /var/lib/etcd); only
# what this machine lacks is replaced, see README.md: systemd's kubelet unit (kubelet-service.sh
# plays it) and the image pulls (images are imported before kubeadm asks for them).
# shellcheck disable=SC2034 # the paths are for the callers

KUBEADM_VERSION=v1.36.3
KA_DIR=$LOCAL/kubeadm              # containerd, CNI, the config file, logs' neighbours
KA_CONFIG=$KA_DIR/kubeadm.yaml     # what `kubeadm init` and `upgrade` read
KA_ADMIN=$KA_DIR/admin.conf        # a copy of /etc/kubernetes/admin.conf for the user
KA_API_PORT=6443
KA_IMAGES=$BIN/images/kubeadm      # make kubeadm-images
KA_MANIFESTS=/etc/kubernetes/manifests
# The upstream DNS server of CoreDNS: an address in a range the network guard makes unreachable,
# so a lookup of an outside name fails on the machine (this machine's resolver is outside).
KA_UPSTREAM_DNS=198.19.255.53
T_KA_READY=${T_KA_READY:-300}

# node.sh's pieces, pointed at this cluster's directory and kubeadm's names.
NODE_DIR=$KA_DIR/node
NODE_RUN=$NODE_DIR/run
CONTAINERD_SOCK=$NODE_DIR/containerd.sock
NODE_SANDBOX_IMAGE=registry.k8s.io/pause:3.10.2
KUBECONFIG_FILE=/etc/kubernetes/admin.conf

ksay() { printf 'kubeadm: %s\n' "$*"; }
kwarn() { printf 'kubeadm: WARNING: %s\n' "$*" >&2; }
kdie() { printf 'kubeadm: ERROR: %s\n' "$*" >&2; exit 1; }
kadm() { "$BIN/kubeadm" "$@"; }
kk() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=15s "$@"; }

# ka_recorded: a cluster was started here (and not yet torn down).
ka_recorded() { [ -f "$KA_DIR/up" ]; }

# ka_config writes the one configuration file of `kubeadm init`. The controller-manager's
# extraArgs come from KA_KCM_ARGS, space-separated name=value pairs (none: kubeadm's defaults),
# as an operator tunes them: the kubeadm e2e sets a few that kcm-split-plan must carry over.
ka_config() {
  local cm_args="" kv
  if [ -n "${KA_KCM_ARGS:-}" ]; then
    cm_args="
  extraArgs:"
    for kv in $KA_KCM_ARGS; do
      [[ "$kv" == ?*=?* ]] || kdie "KA_KCM_ARGS: $kv is not name=value"
      cm_args+="
  - name: ${kv%%=*}
    value: \"${kv#*=}\""
    done
  fi
  cat >"$KA_CONFIG" <<EOF
# Written by deploy/kubeadm (make kubeadm-up).
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $NODE_IP
  bindPort: $KA_API_PORT
nodeRegistration:
  name: $NODE_NAME
  criSocket: unix://$CONTAINERD_SOCK
  # One node: workloads run on it.
  taints: []
  kubeletExtraArgs:
  - name: node-ip
    value: $NODE_IP
  # This machine: no systemd, cgroup v1, swap; br_netfilter may be missing (bridge-nf-call).
  ignorePreflightErrors:
  - SystemVerification
  - Swap
  - FileContent--proc-sys-net-bridge-bridge-nf-call-iptables
  - FileExisting-crictl
  - Service-Kubelet
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $KUBEADM_VERSION
clusterName: kcm-split-kubeadm
controlPlaneEndpoint: $NODE_IP:$KA_API_PORT
networking:
  serviceSubnet: $SERVICE_CIDR
  podSubnet: $POD_CIDR
  dnsDomain: cluster.local
apiServer:
  extraArgs:
  # Keep the apiserver off the machine's own interfaces.
  - name: bind-address
    value: $NODE_IP
  - name: kubelet-preferred-address-types
    value: InternalIP,Hostname
  # Who wrote what (the kubeadm e2e reads it): writes only, with their user agent.
  - name: audit-policy-file
    value: /etc/kubernetes/kcm-split-audit.yaml
  - name: audit-log-path
    value: /var/log/kubernetes/audit/audit.log
  - name: audit-log-maxsize
    value: "200"
  - name: audit-log-maxbackup
    value: "2"
  extraVolumes:
  - name: audit-policy
    hostPath: /etc/kubernetes/kcm-split-audit.yaml
    mountPath: /etc/kubernetes/kcm-split-audit.yaml
    readOnly: true
    pathType: File
  - name: audit-log
    hostPath: /var/log/kubernetes/audit
    mountPath: /var/log/kubernetes/audit
    pathType: DirectoryOrCreate
controllerManager:$cm_args
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 hybrid here, no systemd, swap tolerated.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: $NODE_IP
resolvConf: $KA_DIR/resolv.conf
# Keep the imported images: nothing can be pulled again.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "100Mi", "nodefs.available": "5%", "imagefs.available": "5%"}
serializeImagePulls: false
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
nodePortAddresses: ["$NODE_IP/32"]
# Leave the host's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# ka_audit_policy: writes only (reads are the bulk and prove nothing about two writers), at
# Metadata level: user, user agent, verb, object. Lease renewals included: they date the terms.
ka_audit_policy() {
  mkdir -p /etc/kubernetes /var/log/kubernetes/audit
  cat >/etc/kubernetes/kcm-split-audit.yaml <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  verbs: [get, list, watch]
- level: Metadata
EOF
}

# ka_import_images: kubeadm's images (make kubeadm-images) and the controllers' (make images).
ka_import_images() {
  local img n=0
  [ -d "$KA_IMAGES" ] || kdie "no $KA_IMAGES: make kubeadm-images"
  for img in "$KA_IMAGES"/*.tar "$BIN"/images/*.tar; do
    [ -e "$img" ] || continue
    nctr images import --no-unpack=false "$img" >>"$LOGS/kubeadm-images.log" 2>&1 ||
      kdie "importing $img failed: $LOGS/kubeadm-images.log"
    n=$((n + 1))
  done
  local want wanted have missing=()
  have=$(nctr images ls -q) || kdie "listing containerd's images failed"
  # A failing list would leave nothing to check, and the check would pass: it must succeed.
  wanted=$(kadm config images list --kubernetes-version "$KUBEADM_VERSION" 2>>"$LOGS/kubeadm-images.log") ||
    kdie "kubeadm config images list failed: $LOGS/kubeadm-images.log"
  [ -n "$wanted" ] || kdie "kubeadm config images list named no image: $LOGS/kubeadm-images.log"
  for want in $wanted; do
    grep -qxF "$want" <<<"$have" || missing+=("$want")
  done
  [ ${#missing[@]} -eq 0 ] || kdie "images kubeadm needs are not among $KA_IMAGES: ${missing[*]} (make kubeadm-images)"
  ksay "imported $n images"
}

# ka_kubelet_service starts kubelet-service.sh: what systemd's kubelet unit with kubeadm's
# drop-in does (waits for kubeadm's files, restarts the kubelet when it exits or on SIGHUP).
ka_kubelet_service() {
  node_launch kubelet-service /bin/bash "$ROOT/deploy/kubeadm/kubelet-service.sh" "$BIN/kubelet" "$LOGS/kubeadm-kubelet.log"
}

# ka_kubelet_restart: `systemctl restart kubelet`, which kubeadm asks of the operator after an
# upgrade.
ka_kubelet_restart() {
  local pid exe
  read -r pid exe <"$NODE_RUN/kubelet-service.pid"
  kill -HUP "$pid"
}

# ka_wait_ready: the Node Ready, every kube-system Pod Running and Ready.
ka_wait_ready() {
  local deadline=$((SECONDS + T_KA_READY)) notready
  until kk wait --for=condition=Ready "node/$NODE_NAME" --timeout=5s >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || kdie "Node $NODE_NAME not Ready after ${T_KA_READY}s (log: $LOGS/kubeadm-kubelet.log)"
    node_alive kubelet-service || kdie "kubelet-service exited (log: $LOGS/kubeadm-kubelet.log)"
    sleep 2
  done
  while :; do
    notready=$(kk -n kube-system get pods --no-headers \
      -o custom-columns='N:.metadata.name,P:.status.phase,R:.status.conditions[?(@.type=="Ready")].status' 2>/dev/null |
      awk '$2 != "Running" || $3 != "True" {print $1}' | tr '\n' ' ')
    if [ -z "$notready" ] && [ "$(kk -n kube-system get pods --no-headers 2>/dev/null | grep -c .)" -ge 7 ]; then return 0; fi
    [ "$SECONDS" -lt "$deadline" ] || kdie "kube-system Pods not Ready after ${T_KA_READY}s: $notready"
    sleep 2
  done
}

# ka_pods_left: the node's Pods that are not static (mirror Pods stay until their manifest goes).
ka_pods_left() {
  kk get pods -A --field-selector "spec.nodeName=$NODE_NAME" \
    -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.metadata.annotations.kubernetes\.io/config\.mirror}{"\n"}{end}' 2>/dev/null |
    awk 'NF == 1 {print $1}'
}

# ka_drain empties the node in the order that lets every Pod go for good: the controller-manager
# and scheduler first (nothing recreates a Pod after that: a DaemonSet tolerates every taint),
# then every other Pod (the kubelet stops its containers, runs CNI DEL, unmounts), then the
# apiserver and etcd with their manifests.
ka_drain() {
  local m deadline left
  mkdir -p "$KA_DIR/manifests.removed"
  for m in kube-controller-manager kube-scheduler; do
    [ -f "$KA_MANIFESTS/$m.yaml" ] && mv "$KA_MANIFESTS/$m.yaml" "$KA_DIR/manifests.removed/"
  done
  if kk get --raw=/readyz >/dev/null 2>&1; then
    deadline=$((SECONDS + 60))
    while kk -n kube-system get pods -l 'component in (kube-controller-manager,kube-scheduler)' -o name 2>/dev/null | grep -q .; do
      [ "$SECONDS" -lt "$deadline" ] || { kwarn "controller-manager or scheduler Pod still there after 60s"; break; }
      sleep 1
    done
    kk delete pods -A --field-selector "spec.nodeName=$NODE_NAME" --wait=false >/dev/null 2>&1 || true
    deadline=$((SECONDS + T_DRAIN))
    while left=$(ka_pods_left) && [ -n "$left" ]; do
      if [ "$SECONDS" -ge "$deadline" ]; then kwarn "Pods still on the node after ${T_DRAIN}s: $(echo "$left" | tr '\n' ' ')"; break; fi
      sleep 1
    done
  fi
  for m in "$KA_MANIFESTS"/*.yaml; do [ -e "$m" ] && mv "$m" "$KA_DIR/manifests.removed/"; done
  deadline=$((SECONDS + 60))
  while [ "$(nctr tasks ls -q 2>/dev/null | grep -c .)" != 0 ]; do
    [ "$SECONDS" -lt "$deadline" ] || { kwarn "containers still running 60s after the manifests went"; break; }
    sleep 1
  done
}
