#!/usr/bin/env bash
# Starts a local control plane on loopback, each component a detached process logging to
# .local/logs/<component>.log:
#   etcd, kube-apiserver, kube-scheduler,
#   kube-controller-manager with every controller kcm-split provides turned off,
#   kwok simulating three nodes (pods get IPs and turn Ready),
#   every kcm-split controller binary (services/*/cmd/*), each with its own Lease.
# Running it again while everything runs says so and exits 0. Every fresh start wipes the etcd
# data and moves the last run's logs to .local/logs.prev; the PKI under .local/pki is kept, so
# an exported KUBECONFIG stays valid across runs. If anything fails to come up, what was started
# is stopped again and the error points at the component's log. Stop with down.sh.
# ENDPOINTS_SHARDS=N (default 1; `make up ENDPOINTS_SHARDS=2`) runs endpoints-controller as N
# static shards (--shards=N --shard-index=I), each a process endpoints-controller-shard-I
# (bin/ symlinks to the one binary) with its own port, log and Lease
# endpoints-controller-shard-I-of-N-mixed with ENDPOINTS_SHARD_HASH=mixed (the default, the
# binary's): the shards filter their namespaces themselves (kcm_split_shard_info{mode="client"}).
# ENDPOINTS_SHARD_HASH=fnv: Lease endpoints-controller-shard-I-of-N, and since the apiserver
# always runs with ShardedListAndWatch on, it filters for the shards (mode="server").
# `make dashboards-e2e` runs with ENDPOINTS_SHARDS=2.
# Usage: deploy/local/up.sh
set -Eeuo pipefail # -E: the ERR trap around the PKI also covers functions
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

# Everything KCM runs that kcm-split replaces. Names verified against
# `kube-controller-manager --help` (v1.36); none is off by default, so all are valid here.
KCM_DISABLED=(
  endpoints-controller endpointslice-controller endpointslice-mirroring-controller
  node-lifecycle-controller taint-eviction-controller
  resourcequota-controller namespace-controller service-lb-controller
  persistentvolume-binder-controller node-ipam-controller
)
# UPSTREAM=1: the baseline. kube-controller-manager runs every controller itself and no
# kcm-split binary starts (`UPSTREAM=1 make conformance` compares upstream with kcm-split).
if [ "${UPSTREAM:-}" = 1 ]; then KCM_DISABLED=(); fi
# SERVICE_CIDR, SERVICE_IP, NODE_IP, POD_CIDR, POD_CIDR_IPV6: netguard.sh (via lib.sh).
# nodelifecycle-controller cuts the Pod ranges into one /26 and one /64 per node
# (deploy/local/flags/nodelifecycle-controller), so the 3 kwok nodes use 3 of the 4 IPv4 ranges.
# kwok takes Pod IPs from a node's podCIDR, and from POD_CIDR for a node without one (when
# nodelifecycle-controller is not running).

ENDPOINTS_SHARDS=${ENDPOINTS_SHARDS:-1}
[[ $ENDPOINTS_SHARDS =~ ^[1-9][0-9]?$ ]] || die "ENDPOINTS_SHARDS=$ENDPOINTS_SHARDS: a number of shards, 1 to 99"
ENDPOINTS_SHARD_HASH=${ENDPOINTS_SHARD_HASH:-mixed}
[[ $ENDPOINTS_SHARD_HASH =~ ^(mixed|fnv)$ ]] || die "ENDPOINTS_SHARD_HASH=$ENDPOINTS_SHARD_HASH: mixed or fnv"

# Readiness budgets, seconds.
T_ETCD=30 T_APISERVER=90 T_COMPONENT=60 T_NODES=60

for tool in curl openssl flock setsid base64 go; do
  command -v "$tool" >/dev/null || die "'$tool' is required (Debian: apt-get install curl openssl util-linux coreutils; Go from go.dev)"
done

lock

# --- Already (partly) up? ------------------------------------------------------------------------
mapfile -t previous < <(recorded)
if [ ${#previous[@]} -gt 0 ]; then
  mapfile -t running < <(living "${previous[@]}")
  if [ ${#running[@]} -eq ${#previous[@]} ]; then
    say "already up (${#running[@]} processes; 'make status' lists them, 'make down' stops them)"
    for dir in "$ROOT"/services/*/cmd/*/; do
      name=$(basename "$dir")
      if compgen -G "$dir*.go" >/dev/null && [ ! -f "$RUN/$name.pid" ] && [ ! -f "$RUN/$name-shard-0.pid" ]; then
        say "note: $name is new since this cluster started; 'make down && make up' runs it"
      fi
    done
    summary
    hints
    exit 0
  fi
  if [ ${#running[@]} -gt 0 ]; then
    gone=$(comm -23 <(printf '%s\n' "${previous[@]}" | sort) <(printf '%s\n' "${running[@]}" | sort) | tr '\n' ' ')
    die "partly up: ${gone}exited (logs in $LOGS). Run 'make down' then 'make up'."
  fi
  # Nothing alive: left over from a crash or a reboot.
  say "nothing from the last run is alive (crash or reboot?): starting afresh"
  for name in "${previous[@]}"; do rm -f "$RUN/$name.pid"; done
fi

start=$SECONDS

# --- Binaries -----------------------------------------------------------------------------------
bash "$ROOT/deploy/tools/build.sh"

# Every services/<alias>/cmd/<controller-id>/ with Go files is a kcm-split binary; `make build`
# builds them all into bin/ exactly as they ship.
controllers=()
say "building the kcm-split controllers (make build)"
make -s -C "$ROOT" build >/dev/null || die "building the controllers failed (make build)"
for dir in "$ROOT"/services/*/cmd/*/; do
  [ "${UPSTREAM:-}" = 1 ] && break
  compgen -G "$dir*.go" >/dev/null || continue
  controllers+=("$(basename "$dir")")
done
[ ${#controllers[@]} -gt 0 ] || warn "no kcm-split controller binaries yet (services/*/cmd/*): running without them"
# ENDPOINTS_SHARDS > 1: endpoints-controller becomes endpoints-controller-shard-0..N-1, each a
# symlink in bin/ so that every shard has its own pid file and log, and alive() knows it.
if [ "$ENDPOINTS_SHARDS" -gt 1 ] && [[ " ${controllers[*]} " == *" endpoints-controller "* ]]; then
  sharded=()
  for name in "${controllers[@]}"; do
    if [ "$name" != endpoints-controller ]; then
      sharded+=("$name")
      continue
    fi
    for ((i = 0; i < ENDPOINTS_SHARDS; i++)); do
      ln -sfn endpoints-controller "$BIN/endpoints-controller-shard-$i"
      sharded+=("endpoints-controller-shard-$i")
    done
  done
  controllers=("${sharded[@]}")
  say "endpoints-controller runs as $ENDPOINTS_SHARDS shards (ENDPOINTS_SHARDS)"
fi

# --- Fresh state --------------------------------------------------------------------------------
rm -rf "$DATA"
if [ -d "$LOGS" ]; then rm -rf "$LOGS.prev" && mv "$LOGS" "$LOGS.prev"; fi
mkdir -p "$DATA" "$LOGS" "$RUN" "$LOCAL/config"

# --- Ports: the usual ones, or the next free one ------------------------------------------------
declare -A taken=()
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# pick_port VAR PREFERRED: sets VAR to PREFERRED or the next port nobody listens on.
pick_port() {
  local p=$2
  while port_in_use "$p" || [ -n "${taken[$p]:-}" ]; do p=$((p + 1)); done
  taken[$p]=1
  printf -v "$1" '%s' "$p"
}
pick_port ETCD_PORT 2379
pick_port ETCD_PEER_PORT 2380
pick_port API_PORT 6443
pick_port KCM_PORT 10257
pick_port SCHED_PORT 10259
pick_port KWOK_PORT 10247
CONTROLLER_PORTS="" port=""
for name in "${controllers[@]}"; do
  # Keep each binary's own default secure port (from its --help), but on 127.0.0.1 only.
  preferred=$("$BIN/$name" --help 2>&1 | sed -n 's/.*--secure-port .*(default: \([0-9][0-9]*\)).*/\1/p' | head -n1)
  pick_port port "${preferred:-10300}"
  CONTROLLER_PORTS+="$name=$port "
done
{
  echo "ETCD_PORT=$ETCD_PORT ETCD_PEER_PORT=$ETCD_PEER_PORT API_PORT=$API_PORT"
  echo "KCM_PORT=$KCM_PORT SCHED_PORT=$SCHED_PORT KWOK_PORT=$KWOK_PORT"
  echo "CONTROLLER_PORTS='$CONTROLLER_PORTS'"
} >"$RUN/ports.env"

# --- PKI: a CA, the apiserver's serving cert, client certs, the service-account key --------------
# Made once and kept. A real CA (rather than --cert-dir self-signed certs) lets kubeconfigs verify
# the apiserver and gives KCM a correct --root-ca-file for the kube-root-ca.crt ConfigMaps.
pki_fresh() {
  local f
  for f in ca apiserver admin kube-controller-manager kube-scheduler front-proxy-ca front-proxy-client; do
    openssl x509 -checkend 86400 -noout -in "$PKI/$f.crt" >/dev/null 2>&1 || return 1
  done
  [ -s "$PKI/sa.key" ] && [ -s "$PKI/sa.pub" ] &&
    # the real node's IP (make node-up) among the serving certificate's names
    openssl x509 -noout -ext subjectAltName -in "$PKI/apiserver.crt" 2>/dev/null | grep -q "IP Address:$NODE_IP\b"
}
# leaf NAME SUBJECT EXTENSIONS-SECTION: a key and a cert signed by $CA (default: the cluster CA).
leaf() {
  local ca=${CA:-ca}
  openssl req -new -nodes -newkey rsa:2048 -keyout "$PKI/$1.key" -subj "$2" -config "$PKI/openssl.cnf" |
    openssl x509 -req -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 365 -extfile "$PKI/openssl.cnf" -extensions "$3" -out "$PKI/$1.crt"
}
if ! pki_fresh; then
  say "generating PKI in $PKI"
  rm -rf "$PKI"
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  # openssl is chatty (key-generation dots): keep its output for when something fails.
  exec 8>&2 2>"$LOGS/openssl.log"
  trap 'exec 2>&8; die "generating the PKI failed; openssl said: $LOGS/openssl.log"' ERR
  cat >"$PKI/openssl.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, IP:$SERVICE_IP, IP:$NODE_IP, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
EOF
  openssl req -x509 -new -nodes -newkey rsa:2048 -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -days 3650 \
    -subj "/CN=kcm-split-local-ca" -config "$PKI/openssl.cnf" -extensions ca
  leaf apiserver "/CN=kube-apiserver" server
  # Client identities: system:masters for people, kwok and the kcm-split controllers; the
  # bootstrap RBAC users for KCM and the scheduler, so they get exactly their upstream rights.
  leaf admin "/O=system:masters/CN=kcm-split-admin" client
  leaf kube-controller-manager "/CN=system:kube-controller-manager" client
  leaf kube-scheduler "/CN=system:kube-scheduler" client
  # The aggregation layer's own CA (as kubeadm does): KCM and the scheduler read it from
  # kube-system/extension-apiserver-authentication and log errors every few seconds without it.
  openssl req -x509 -new -nodes -newkey rsa:2048 -keyout "$PKI/front-proxy-ca.key" -out "$PKI/front-proxy-ca.crt" \
    -days 3650 -subj "/CN=kcm-split-local-front-proxy-ca" -config "$PKI/openssl.cnf" -extensions ca
  CA=front-proxy-ca leaf front-proxy-client "/CN=front-proxy-client" client
  openssl genrsa -out "$PKI/sa.key" 2048
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
  chmod 600 "$PKI"/*.key
  trap - ERR
  exec 2>&8 8>&-
fi

# kubeconfig FILE IDENTITY: a self-contained kubeconfig (certs embedded), rewritten every run
# because the apiserver port may change.
kubeconfig() {
  (
    umask 077
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kcm-split-local
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$2.crt")
    client-key-data: $(base64 -w0 "$PKI/$2.key")
contexts:
- name: kcm-split-local
  context: {cluster: kcm-split-local, user: $2}
current-context: kcm-split-local
EOF
  )
}
kubeconfig "$KUBECONFIG_FILE" admin
kubeconfig "$LOCAL/config/kube-controller-manager.kubeconfig" kube-controller-manager
kubeconfig "$LOCAL/config/kube-scheduler.kubeconfig" kube-scheduler
kubectl() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# --- Process helpers ----------------------------------------------------------------------------
# On any failure from here on, stop what was started (logs stay) so no half cluster is left.
ok=""
cleanup() {
  if [ -z "$ok" ]; then
    say "stopping what was started; logs stay in $LOGS"
    stop_all >/dev/null || true
    # Another clone's cluster (or a kubeadm cluster) keeps the guard it uses.
    if [ "${NG_HELD:-}" = 1 ]; then netguard_release_down "$RUN" quiet || true; fi
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# As root: the cluster's ranges routed on the machine and counted on the way out
# (deploy/local/netguard.sh); refuses ranges the machine already uses.
netguard_hold_up "$RUN" || die "the network guard could not be set up (above)"
NG_HELD=1

# launch NAME ARGS...: runs bin/NAME detached. setsid gives it its own session, so neither the
# end of `make up` nor a Ctrl-C in this terminal reaches it; the job is not a process-group
# leader, so setsid execs in place and $! is the component's pid. 9>&- drops the lock fd.
launch() {
  local name=$1
  shift
  setsid "$BIN/$name" "$@" </dev/null >"$LOGS/$name.log" 2>&1 9>&- &
  echo $! >"$RUN/$name.pid"
}

# fail NAME MESSAGE: reports a component that did not come up, with the end of its log.
fail() { report_failure local "$1" "$1" "$2"; }

# wait_for NAME TIMEOUT WHAT CMD...: polls CMD until it succeeds; fails fast if NAME exits.
wait_for() { poll_until alive fail "$@"; }

# https_ok URL: a loopback health endpoint of a component with its own self-signed cert.
https_ok() { curl -fsSk --max-time 3 "$1" | grep -qx ok; }
http_ok() { curl -fsS --max-time 3 "$1" | grep -qx ok; }
api_ok() {
  curl -fsS --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$API_PORT$1" | grep -qx ok
}
lease_held() { [ -n "$(kubectl -n kube-system get lease "$1" -o 'jsonpath={.spec.holderIdentity}')" ]; }
# shard_of NAME: the shard index of a process endpoints-controller-shard-I, nothing for others.
shard_of() { [[ $1 == *-shard-* ]] && echo "${1##*-shard-}"; }
# lease_of NAME: the Lease a controller process holds: its shard's (shared/sharding's LeaseName:
# -mixed after it for the mixed hash), or its own name.
lease_of() {
  local i suffix=""
  [ "$ENDPOINTS_SHARD_HASH" = mixed ] && suffix=-mixed
  if i=$(shard_of "$1"); then echo "${1%-shard-*}-shard-$i-of-$ENDPOINTS_SHARDS$suffix"; else echo "$1"; fi
}
sa_exists() { kubectl -n default get serviceaccount default; }

# --- etcd ---------------------------------------------------------------------------------------
say "starting etcd on 127.0.0.1:$ETCD_PORT"
launch etcd \
  --name=local --data-dir="$DATA/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="local=http://127.0.0.1:$ETCD_PEER_PORT" --log-level=warn
wait_for etcd "$T_ETCD" "/health" sh -c "curl -fsS --max-time 3 http://127.0.0.1:$ETCD_PORT/health | grep -q '\"health\":\"true\"'"

# --- kube-apiserver -----------------------------------------------------------------------------
# The not-ready taint that TaintNodesByCondition puts on new nodes is lifted only by a node
# lifecycle controller. KCM's is off; without kcm-split's, keep the taint off so pods schedule.
admission=()
if [[ " ${controllers[*]} " != *" nodelifecycle-controller "* ]]; then
  admission=(--disable-admission-plugins=TaintNodesByCondition)
fi
# --endpoint-reconciler-type=none: the apiserver would publish its advertise address as the
# "kubernetes" Service's endpoints, and validation rejects 127.0.0.1 (loopback) there, every 10s.
# Nothing runs in a pod here unless `make node-up` adds a real node, which publishes its own
# relay as those endpoints. --kubelet-*: `kubectl logs/exec` reach that node's kubelet by IP.
say "starting kube-apiserver on https://127.0.0.1:$API_PORT"
launch kube-apiserver \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
  --authorization-mode=Node,RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --endpoint-reconciler-type=none \
  --kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --allow-privileged=true \
  --feature-gates=ShardedListAndWatch=true \
  "${admission[@]}"
wait_for kube-apiserver "$T_APISERVER" "/readyz" api_ok /readyz

say "creating 3 kwok nodes (deploy/local/nodes.yaml)"
kubectl create -f "$HERE/nodes.yaml" >/dev/null
# service-lb-controller's address pools: the CRD as the chart ships it, and a demo pool
# (198.18.0.0/24, 2001:db8::/120: inside netguard.sh's ranges).
say "applying charts/kcm-split/crds and the demo address pool"
kubectl apply -f "$ROOT/charts/kcm-split/crds/" >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/ipaddresspools.lb.kcm-split.io >/dev/null
kubectl apply -f "$HERE/manifests/servicelb-demo-pool.yaml" >/dev/null

# --- Everything else talks only to the apiserver: start it all, then wait for each --------------
kcm_controllers="*"
[ ${#KCM_DISABLED[@]} -eq 0 ] || kcm_controllers="*$(printf ',-%s' "${KCM_DISABLED[@]}")"
say "starting kube-controller-manager (--controllers=$kcm_controllers)"
launch kube-controller-manager \
  --kubeconfig="$LOCAL/config/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="$LOCAL/config/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="$LOCAL/config/kube-controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
  --leader-elect=false \
  --controllers="$kcm_controllers" \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key"

cat >"$LOCAL/config/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $LOCAL/config/kube-scheduler.kubeconfig
leaderElection:
  leaderElect: false
EOF
say "starting kube-scheduler"
launch kube-scheduler \
  --config="$LOCAL/config/kube-scheduler.yaml" \
  --authentication-kubeconfig="$LOCAL/config/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="$LOCAL/config/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$SCHED_PORT"

# kwok has no built-in stages: pass each. Node Leases (40s, like kubelet) keep a node lifecycle
# controller from marking the nodes unreachable; pod IPs come from each node's podCIDR when a
# node-ipam controller set one, else from --cidr.
stages=()
for f in "$BIN"/kwok-stages/*.yaml; do stages+=(-c "$f"); done
say "starting kwok"
launch kwok \
  --kubeconfig="$KUBECONFIG_FILE" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-lease-duration-seconds=40 --cidr="$POD_CIDR" \
  --server-address="127.0.0.1:$KWOK_PORT" \
  "${stages[@]}"

# Readable logs unless the caller chose otherwise (every flag also reads KCM_SPLIT_<FLAG>).
export KCM_SPLIT_LOG_FORMAT=${KCM_SPLIT_LOG_FORMAT:-console}
for entry in $CONTROLLER_PORTS; do
  name=${entry%=*}
  base=${name%-shard-*}
  extra=()
  # Optional local-only flags, one per line: deploy/local/flags/<controller-id>.
  # ${SERVICE_CIDR}, ${POD_CIDR} and ${POD_CIDR_IPV6} in them stand for this script's values.
  if [ -f "$HERE/flags/$base" ]; then mapfile -t extra < <(grep -v '^[[:space:]]*\(#\|$\)' "$HERE/flags/$base"); fi
  if i=$(shard_of "$name"); then extra+=(--shards="$ENDPOINTS_SHARDS" --shard-index="$i" --shard-hash="$ENDPOINTS_SHARD_HASH"); fi
  for i in "${!extra[@]}"; do
    extra[i]=${extra[i]//'${SERVICE_CIDR}'/$SERVICE_CIDR}
    extra[i]=${extra[i]//'${POD_CIDR}'/$POD_CIDR}
    extra[i]=${extra[i]//'${POD_CIDR_IPV6}'/$POD_CIDR_IPV6}
  done
  say "starting $name (https://127.0.0.1:${entry#*=}/metrics, bearer token needed)"
  launch "$name" --kubeconfig="$KUBECONFIG_FILE" --secure-port="${entry#*=}" --bind-address=127.0.0.1 "${extra[@]}"
done

wait_for kube-controller-manager "$T_COMPONENT" "/healthz" https_ok "https://127.0.0.1:$KCM_PORT/healthz"
wait_for kube-controller-manager "$T_COMPONENT" "serviceaccount default/default" sa_exists
wait_for kube-scheduler "$T_COMPONENT" "/healthz" https_ok "https://127.0.0.1:$SCHED_PORT/healthz"
wait_for kwok "$T_COMPONENT" "/healthz" http_ok "http://127.0.0.1:$KWOK_PORT/healthz"
wait_for kwok "$T_NODES" "3 Ready nodes" kubectl wait --for=condition=Ready node -l type=kwok --timeout=5s
for entry in $CONTROLLER_PORTS; do
  name=${entry%=*}
  wait_for "$name" "$T_COMPONENT" "/readyz" https_ok "https://127.0.0.1:${entry#*=}/readyz"
  wait_for "$name" "$T_COMPONENT" "Lease kube-system/$(lease_of "$name") held" lease_held "$(lease_of "$name")"
done

ok=1
say "up in $((SECONDS - start))s"
summary
hints
