# shellcheck shell=bash
# A real node beside kwok's three: containerd + runc + CNI (Debian packages), kubelet and
# kube-proxy v1.36.3 (deploy/tools), the images of `make images` imported. Sourced by
# node-up.sh, node-down.sh and down.sh after lib.sh; callers set -euo pipefail. Needs root.
# Facts behind every setting: shared/REALNODE.md (the project's notes) and deploy/local/README.md.
# shellcheck disable=SC2034 # the paths are for the callers

NODE_NAME=${NODE_NAME:-kcm-split-node}
# NODE_IP (netguard.sh, via lib.sh): a private /32 on lo; the kubelet refuses a loopback node
# IP and this kernel has no dummy links.
NODE_DIR=$LOCAL/node           # everything the node writes, except what the kernel keeps
NODE_RUN=$NODE_DIR/run         # <component>.pid ("pid exe" on one line)
NODE_BRIDGE=kcm0               # the CNI bridge
# NODE_FALLBACK_CIDR (netguard.sh): used when no node IPAM gave the node a Pod range within
# T_PODCIDR seconds (UPSTREAM=1).
CONTAINERD_SOCK=$NODE_DIR/containerd.sock
# The kubelet's fixed ports make this one node per machine.
KUBELET_PORT=10250 KUBELET_HEALTHZ=10248 PROXY_HEALTHZ=10256 PROXY_METRICS=10249
# Sysctls the kubelet, kube-proxy or the bridge plugin may change; node-down puts them back.
NODE_SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet)
# The order node-down stops them in (the kubelet only after its Pods are gone).
NODE_COMPONENTS=(kube-proxy kubelet tcpforward containerd)
T_NODE_READY=${T_NODE_READY:-90} T_PODCIDR=${T_PODCIDR:-30} T_DRAIN=${T_DRAIN:-120}

nsay() { printf 'node: %s\n' "$*"; }
nwarn() { printf 'node: WARNING: %s\n' "$*" >&2; }
ndie() { printf 'node: ERROR: %s\n' "$*" >&2; exit 1; }
nk() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=15s "$@"; }
nctr() { ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }

# node_alive NAME: the recorded process runs and is still the recorded executable.
node_alive() {
  local pid exe
  read -r pid exe 2>/dev/null <"$NODE_RUN/$1.pid" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ]
}

# node_launch NAME EXE ARGS...: a detached process (own session, no lock fd), logging to
# .local/logs/node-NAME.log.
node_launch() {
  local name=$1 exe=$2
  shift 2
  setsid "$exe" "$@" </dev/null >"$LOGS/node-$name.log" 2>&1 9>&- &
  local pid=$! real i
  real=$(readlink -f "$exe")
  echo "$pid $real" >"$NODE_RUN/$name.pid"
  # Until the forked shell has exec'd, /proc/<pid>/exe is still bash: wait for the exec so
  # that node_alive does not take a slow start for an exit.
  for ((i = 0; i < 50; i++)); do
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" != "$real" ] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
}

# node_stop NAME: SIGTERM, SIGKILL after 30 s.
node_stop() {
  local pid exe i
  if node_alive "$1"; then
    read -r pid exe <"$NODE_RUN/$1.pid"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do node_alive "$1" || break; sleep 0.2; done
    if node_alive "$1"; then
      nwarn "$1 still running 30s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do node_alive "$1" || break; sleep 0.2; done
    fi
  fi
  rm -f "$NODE_RUN/$1.pid"
}

node_fail() { report_failure node "node-$1" "$1" "$2"; }

# node_wait NAME TIMEOUT WHAT CMD...: polls CMD; fails fast if NAME exits.
node_wait() { poll_until node_alive node_fail "$@"; }

# node_recorded: a node was started (and not yet torn down).
node_recorded() { [ -d "$NODE_RUN" ] || [ -f "$NODE_DIR/up" ]; }

# One real node per machine (the kubelet's ports, /sys/fs/cgroup/*/kubepods, the CNI namespaces):
# `make node-up` and `make kubeadm-up`, from any clone, claim the node here first. The claim
# holds the claimer's node directory; it is stale (taken over) once that directory is gone.
NODE_CLAIM=/run/kcm-split-node.claim

# node_claim DIR WHAT: claims the machine's node for DIR, or fails naming who holds it. The
# check and the write are one step under a lock (flock on NODE_CLAIM.lock), so two claims
# at once cannot both see the node free.
node_claim() {
  local dir=$1 what=$2
  mkdir -p "$(dirname "$NODE_CLAIM")"
  (
    flock 7 || ndie "cannot lock $NODE_CLAIM.lock"
    held="" by=""
    if [ -f "$NODE_CLAIM" ]; then
      read -r held by <"$NODE_CLAIM" || true
      if [ -n "$held" ] && [ "$held" != "$dir" ] && [ -d "$held" ]; then
        ndie "this machine's one real node is held by $by ($held): tear that down first"
      fi
    fi
    echo "$dir $what" >"$NODE_CLAIM"
  ) 7>"$NODE_CLAIM.lock" || exit 1
}

# node_release DIR: drops the claim if DIR holds it (under node_claim's lock).
node_release() {
  mkdir -p "$(dirname "$NODE_CLAIM")"
  (
    flock 7 || exit 0
    held=""
    [ -f "$NODE_CLAIM" ] && read -r held _ <"$NODE_CLAIM"
    if [ "$held" = "$1" ]; then rm -f "$NODE_CLAIM"; fi
  ) 7>"$NODE_CLAIM.lock"
}

# node_packages installs containerd, runc and the CNI plugins (and iptables) when missing.
node_packages() {
  local missing=()
  command -v containerd >/dev/null && command -v ctr >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] && [ -x /usr/lib/cni/portmap ] ||
    missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v nft >/dev/null || missing+=(nftables)
  [ ${#missing[@]} -eq 0 ] && return
  nsay "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q "${missing[@]}" >"$LOGS/node-apt.log" 2>&1; then
    apt-get update -q >>"$LOGS/node-apt.log" 2>&1 || true
    apt-get install -y -q "${missing[@]}" >>"$LOGS/node-apt.log" 2>&1 ||
      ndie "apt-get install ${missing[*]} failed: $LOGS/node-apt.log"
  fi
}

# node_cert NAME SUBJECT: a client certificate for the node's components, signed by the CA of
# deploy/local's PKI, made afresh every node-up.
node_cert() {
  openssl req -new -nodes -newkey rsa:2048 -keyout "$NODE_DIR/pki/$1.key" -subj "$2" \
    -config "$PKI/openssl.cnf" 2>>"$LOGS/openssl.log" |
    openssl x509 -req -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 30 -extfile "$PKI/openssl.cnf" -extensions client -out "$NODE_DIR/pki/$1.crt" 2>>"$LOGS/openssl.log"
}

node_kubeconfig() { # FILE CERT-NAME
  (
    umask 077
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$NODE_DIR/pki/$2.crt", client-key: "$NODE_DIR/pki/$2.key"}
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
EOF
  )
}

# node_images: the image tarballs of `make images` (bin/images/*.tar).
node_images() { compgen -G "$BIN/images/*.tar" || true; }

# The sandbox image containerd asks for: whatever image named */pause:* make images built,
# tagged with this name after the import (so the name make images gives it does not matter).
NODE_SANDBOX_IMAGE=docker.io/kcm-split-node/sandbox:local

node_containerd_config() {
  cat >"$NODE_DIR/containerd.toml" <<EOF
# Written by deploy/local/node.sh. Everything under $NODE_DIR.
version = 2
root = "$NODE_DIR/containerd/root"
state = "$NODE_DIR/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE_DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$NODE_SANDBOX_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: the -998 oom_score_adj of a sandbox would be refused.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$NODE_DIR/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni/net.d"
EOF
}

# node_cni_config SUBNET: a bridge with host-local addresses; routes only to the Service range
# and the node IP, no masquerade: no Pod traffic leaves the machine. portmap serves Pods'
# hostPorts (DNAT on the node, as a kubeadm cluster's CNI does).
node_cni_config() {
  mkdir -p "$NODE_DIR/cni/net.d" "$NODE_DIR/cni/ipam"
  cat >"$NODE_DIR/cni/net.d/10-kcm-split.conflist.tmp" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kcm-split",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$NODE_DIR/cni/ipam",
        "ranges": [[{"subnet": "$1"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}, {"dst": "$NODE_IP/32"}]
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}
EOF
  mv "$NODE_DIR/cni/net.d/10-kcm-split.conflist.tmp" "$NODE_DIR/cni/net.d/10-kcm-split.conflist"
}

node_kubelet_config() {
  cat >"$NODE_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# cgroup v1 hybrid here, no systemd, swap tolerated.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
staticPodPath: $NODE_DIR/kubelet/manifests
podLogsDir: $NODE_DIR/pod-logs
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# Keep the images imported from bin/images: nothing can be pulled again.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "100Mi", "nodefs.available": "5%", "imagefs.available": "5%"}
serializeImagePulls: false
EOF
}

node_kube_proxy_config() {
  cat >"$NODE_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: $NODE_NAME
clientConnection: {kubeconfig: $NODE_DIR/kube-proxy.kubeconfig}
clusterCIDR: $1
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ
metricsBindAddress: 127.0.0.1:$PROXY_METRICS
nodePortAddresses: ["$NODE_IP/32"]
# Leave the host's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# node_up starts the node on a running control plane (API_PORT from ports.env) and waits until
# it is Ready. On failure what was started is torn down again.
node_up() {
  [ "$(id -u)" = 0 ] || ndie "a real node needs root (containerd, network namespaces, iptables)"
  node_recorded && ndie "a node is already recorded in $NODE_DIR: 'make node-down' first"
  [ -f "$RUN/ports.env" ] || ndie "the control plane is not up: 'make up' first"
  # shellcheck source=/dev/null
  source "$RUN/ports.env"
  [ -n "${API_PORT:-}" ] || ndie "no API_PORT in $RUN/ports.env"
  nk get --raw=/readyz >/dev/null 2>&1 || ndie "kube-apiserver does not answer on 127.0.0.1:$API_PORT ('make up' first)"
  local start=$SECONDS
  node_packages
  for b in kubelet kube-proxy tcpforward; do
    [ -x "$BIN/$b" ] || ndie "$BIN/$b missing: make tools"
  done
  mapfile -t images < <(node_images)
  [ ${#images[@]} -gt 0 ] || nwarn "no images in $BIN/images (make images): the node comes up, but no Pod can start"

  # Before anything is made: a failure here must not tear down the other node (node_down).
  node_claim "$NODE_DIR" "make node-up"
  mkdir -p "$NODE_RUN" "$NODE_DIR/pki" "$NODE_DIR/kubelet/manifests" "$NODE_DIR/pod-logs" "$LOGS"
  touch "$NODE_DIR/up"
  local s
  : >"$NODE_DIR/sysctl.saved"
  for s in "${NODE_SYSCTLS[@]}"; do
    if v=$(sysctl -n "$s" 2>/dev/null); then echo "$s=$v" >>"$NODE_DIR/sysctl.saved"; fi
  done

  # make up as root set the guard up; a make up by another user did not.
  netguard_active || netguard_up || ndie "the network guard could not be set up (above)"
  if [[ "$(ip -o addr show dev lo)" != *" $NODE_IP/32 "* ]]; then ip addr add "$NODE_IP/32" dev lo; fi

  node_cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  node_cert kube-proxy "/CN=system:kube-proxy"
  node_kubeconfig "$NODE_DIR/kubelet.kubeconfig" kubelet
  node_kubeconfig "$NODE_DIR/kube-proxy.kubeconfig" kube-proxy

  nsay "starting containerd ($CONTAINERD_SOCK)"
  node_containerd_config
  node_launch containerd "$(command -v containerd)" --config "$NODE_DIR/containerd.toml"
  node_wait containerd 30 "its socket" ctr --address "$CONTAINERD_SOCK" version
  local img
  for img in ${images[@]+"${images[@]}"}; do
    nctr images import --no-unpack=false "$img" >>"$LOGS/node-images.log" 2>&1 ||
      ndie "importing $img failed: $LOGS/node-images.log"
  done
  local pause
  pause=$(nctr images ls -q | grep -m1 '/pause:' || true)
  if [ -n "$pause" ]; then
    nctr images tag "$pause" "$NODE_SANDBOX_IMAGE" >/dev/null
  else
    nwarn "no */pause:* image among bin/images: no Pod sandbox can start (make images)"
  fi
  nsay "imported ${#images[@]} images: $(nctr images ls -q | grep -v '^sha256:' | tr '\n' ' ')"

  # Pods reach the apiserver at the kubernetes Service's ClusterIP; kube-proxy sends that to
  # <node IP>:<port>, which this relays to the loopback-only apiserver.
  node_launch tcpforward "$BIN/tcpforward" -listen "$NODE_IP:$API_PORT" -to "127.0.0.1:$API_PORT"
  node_wait tcpforward 10 "listening on $NODE_IP:$API_PORT" bash -c "exec 3<>/dev/tcp/$NODE_IP/$API_PORT"
  # The apiserver runs with --endpoint-reconciler-type=none (it advertises 127.0.0.1): publish
  # the relay as the kubernetes Service's endpoint, as Endpoints and as the EndpointSlice
  # kube-proxy reads (written here, as the apiserver would, so nothing mirrors it).
  nk apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Endpoints
metadata:
  name: kubernetes
  namespace: default
  labels: {endpointslice.kubernetes.io/skip-mirror: "true"}
subsets:
- addresses: [{ip: "$NODE_IP"}]
  ports: [{name: https, port: $API_PORT, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: real-node.kcm-split.io}
addressType: IPv4
endpoints:
- addresses: ["$NODE_IP"]
  conditions: {ready: true}
ports: [{name: https, port: $API_PORT, protocol: TCP}]
EOF

  nsay "starting kubelet ($NODE_NAME, $NODE_IP)"
  node_kubelet_config
  node_launch kubelet "$BIN/kubelet" --config="$NODE_DIR/kubelet.yaml" \
    --kubeconfig="$NODE_DIR/kubelet.kubeconfig" --root-dir="$NODE_DIR/kubelet" \
    --cert-dir="$NODE_DIR/kubelet/pki" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
    --node-labels="type=real,topology.kubernetes.io/region=local,topology.kubernetes.io/zone=zone-real"
  node_wait kubelet 60 "Node $NODE_NAME registered" nk get node "$NODE_NAME"

  # The Pod range: the one node IPAM (nodelifecycle-controller --allocate-node-cidrs) gave the
  # node, distinct from the kwok nodes'; else a private fallback.
  local cidr="" deadline=$((SECONDS + T_PODCIDR))
  while [ -z "$cidr" ] && [ "$SECONDS" -lt "$deadline" ]; do
    cidr=$(nk get node "$NODE_NAME" -o jsonpath='{.spec.podCIDRs}' 2>/dev/null | tr -d '[]"' | tr ',' '\n' | grep -m1 '\.' || true)
    [ -n "$cidr" ] || sleep 0.5
  done
  if [ -z "$cidr" ]; then
    cidr=$NODE_FALLBACK_CIDR
    nwarn "no Pod range assigned to $NODE_NAME within ${T_PODCIDR}s (node IPAM off?): Pods use $cidr"
  fi
  echo "$cidr" >"$NODE_DIR/podcidr"
  node_cni_config "$cidr"

  nsay "starting kube-proxy (iptables, cluster CIDR $cidr)"
  node_kube_proxy_config "$cidr"
  node_launch kube-proxy "$BIN/kube-proxy" --config="$NODE_DIR/kube-proxy.yaml"
  node_wait kube-proxy 60 "/healthz" curl -fsS --max-time 3 "http://127.0.0.1:$PROXY_HEALTHZ/healthz"
  node_wait kubelet "$T_NODE_READY" "Node $NODE_NAME Ready" nk wait --for=condition=Ready "node/$NODE_NAME" --timeout=5s
  nsay "node $NODE_NAME Ready in $((SECONDS - start))s (IP $NODE_IP, Pods $cidr, label type=real)"
}

# node_drain: taint the node so nothing more lands there and delete its Pods; the kubelet stops
# their containers, runs CNI DEL and unmounts their volumes before the Pods disappear.
node_drain() {
  nk get node "$NODE_NAME" >/dev/null 2>&1 || return 0
  nk taint node "$NODE_NAME" kcm-split.io/teardown=:NoExecute --overwrite >/dev/null || true
  nk delete pods -A --field-selector "spec.nodeName=$NODE_NAME" --wait=false >/dev/null 2>&1 || true
  local deadline=$((SECONDS + T_DRAIN)) n
  while :; do
    n=$(nk get pods -A --field-selector "spec.nodeName=$NODE_NAME" -o name 2>/dev/null | grep -c . || true)
    [ "$n" = 0 ] && return 0
    if ! node_alive kubelet; then nwarn "kubelet not running: $n Pods left on the node"; return 0; fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      nwarn "$n Pods still on $NODE_NAME after ${T_DRAIN}s; tearing down anyway (log: $LOGS/node-kubelet.log)"
      return 0
    fi
    sleep 1
  done
}

# node_iptables_clean removes every KUBE-* and CNI-* chain (and the rules jumping to them) that
# kube-proxy --cleanup left, the kubelet's own among them.
node_iptables_clean() {
  local cmd table chain rule
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in nat filter mangle; do
      "$cmd" -t "$table" -S >/dev/null 2>&1 || continue
      while read -r rule; do
        # shellcheck disable=SC2086 # the rule's words are arguments
        eval "$cmd -t $table ${rule/-A /-D }" 2>/dev/null || true
      done < <("$cmd" -t "$table" -S | grep -E '^-A [^ ]+ .*-j (KUBE|CNI)-' | grep -vE '^-A (KUBE|CNI)-')
      for chain in $("$cmd" -t "$table" -S | sed -n 's/^-N \(\(KUBE\|CNI\)-[^ ]*\)$/\1/p'); do
        "$cmd" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$cmd" -t "$table" -S | sed -n 's/^-N \(\(KUBE\|CNI\)-[^ ]*\)$/\1/p'); do
        "$cmd" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# node_down tears the node down in the order that leaves nothing behind: Pods gone first, then
# kube-proxy and the kubelet, iptables, containers and images, the shims, mounts, links, the
# node IP, sysctls, cgroups. Safe to run twice or after a half-done node_up.
node_down() {
  node_recorded || return 0
  nsay "tearing down $NODE_NAME"
  local start=$SECONDS api=0
  if [ -f "$RUN/ports.env" ]; then
    # shellcheck source=/dev/null
    source "$RUN/ports.env"
    if nk get --raw=/readyz >/dev/null 2>&1; then api=1; fi
  fi
  [ "$api" = 1 ] && node_drain
  node_stop kube-proxy
  node_stop kubelet
  "$BIN/kube-proxy" --cleanup >"$LOGS/node-kube-proxy-cleanup.log" 2>&1 || true
  node_iptables_clean
  if node_alive containerd; then
    local c
    for c in $(nctr tasks ls -q 2>/dev/null); do nctr tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true; done
    sleep 0.5
    for c in $(nctr tasks ls -q 2>/dev/null); do nctr tasks rm -f "$c" >/dev/null 2>&1 || true; done
    for c in $(nctr containers ls -q 2>/dev/null); do nctr containers rm "$c" >/dev/null 2>&1 || true; done
    mapfile -t imgs < <(nctr images ls -q 2>/dev/null)
    [ ${#imgs[@]} -eq 0 ] || nctr images rm "${imgs[@]}" >/dev/null 2>&1 || true
  fi
  node_stop tcpforward
  node_stop containerd
  # Shims of this containerd outlive it: end those still serving a task of ours.
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  # Network namespaces the CRI made (their veths go with them), then the bridge.
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '/^cni-/ {print $1}'); do ip netns delete "$ns" 2>/dev/null || true; done
  ip link delete "$NODE_BRIDGE" 2>/dev/null || true
  # Mounts under the node's directory, deepest first (only when a drain could not finish).
  local m
  for m in $(findmnt -rn -o TARGET | grep -F "$NODE_DIR" | sort -r); do umount -l "$m" 2>/dev/null || true; done
  if [[ "$(ip -o addr show dev lo)" == *" $NODE_IP/32 "* ]]; then ip addr del "$NODE_IP/32" dev lo; fi
  if [ -f "$NODE_DIR/sysctl.saved" ]; then
    while IFS= read -r kv; do sysctl -qw "$kv" >/dev/null 2>&1 || true; done <"$NODE_DIR/sysctl.saved"
  fi
  # The kubelet's cgroups (cgroupfs driver: /kubepods in every hierarchy), deepest first.
  find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} + 2>/dev/null || true
  # The kubelet links every container's log in /var/log/containers.
  find /var/log/containers -maxdepth 1 -type l -lname "$NODE_DIR/*" -delete 2>/dev/null || true
  if [ "$api" = 1 ]; then
    nk delete node "$NODE_NAME" --ignore-not-found >/dev/null 2>&1 || true
    nk -n default delete endpoints kubernetes --ignore-not-found >/dev/null 2>&1 || true
    nk -n default delete endpointslice kubernetes --ignore-not-found >/dev/null 2>&1 || true
  fi
  # Keep logs (in .local/logs) but not the node's state: the next node-up starts afresh.
  rm -rf "$NODE_DIR"
  node_release "$NODE_DIR"
  nsay "torn down in $((SECONDS - start))s"
  node_leftovers || nwarn "leftovers above (see $LOGS/node-*.log)"
}

# node_leftovers prints what a node left on the machine; returns 1 if anything.
node_leftovers() {
  local bad=0 out
  out=$(ip netns list 2>/dev/null | grep '^cni-' || true)
  [ -z "$out" ] || { echo "leftover network namespaces: $out"; bad=1; }
  out=$(ip -o link show type veth 2>/dev/null || true)
  [ -z "$out" ] || { echo "leftover veths: $out"; bad=1; }
  out=$(ip -o link show "$NODE_BRIDGE" 2>/dev/null || true)
  [ -z "$out" ] || { echo "leftover bridge: $out"; bad=1; }
  out=$(findmnt -rn -o TARGET | grep -F "$LOCAL/" || true)
  [ -z "$out" ] || { echo "leftover mounts under $LOCAL: $out"; bad=1; }
  out=$( (iptables-save 2>/dev/null; ip6tables-save 2>/dev/null) | grep -E '^:(KUBE|CNI)-' || true)
  [ -z "$out" ] || { echo "leftover iptables chains: $(echo "$out" | cut -d' ' -f1 | tr '\n' ' ')"; bad=1; }
  out=$(ip -o addr show dev lo | grep -w "$NODE_IP" || true)
  [ -z "$out" ] || { echo "node IP $NODE_IP still on lo"; bad=1; }
  out=$(pgrep -af "$CONTAINERD_SOCK|$BIN/kubelet|$BIN/kube-proxy|$BIN/tcpforward" || true)
  [ -z "$out" ] || { echo "leftover processes: $out"; bad=1; }
  [ "$bad" = 0 ]
}
