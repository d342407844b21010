#!/usr/bin/env bash
# make conformance-full: every [Conformance] spec of e2e.test v1.36.3 on the kubeadm cluster of
# `make kubeadm-up` (deploy/kubeadm), with kcm-split in charge of its six controllers' work and
# kube-controller-manager (KCM) keeping the rest; UPSTREAM=1 runs the same specs on the same
# cluster with KCM owning everything (the baseline). See deploy/conformance/README.md.
#   1. builds what it needs: the tools, e2e.test and the ginkgo CLI (deploy/tools/build.sh),
#      kubeadm's images, the controllers' images from the current code, kcm-split-plan;
#   2. make kubeadm-up, unless a kubeadm cluster runs already (then it is reused: parts run
#      one after the other on one cluster with KEEP_UP=1);
#   3. imports the images just built (a reused cluster has older ones) and tags stand-ins for
#      images e2e.test asks for and nothing here builds (nothing can be pulled; STANDINS=0
#      leaves the tags out);
#   4. puts the cluster on the side asked for, by the chart README's kubeadm runbook, its command
#      blocks run as written (deploy/tests/kubeadm/cmd/runbook prints them): kcm-split's side is
#      its steps 0 to 3 (kcm-split-plan, the chart with the take-over, the ClusterConfiguration
#      with the controllers off, KCM rendered from it; every binary active); UPSTREAM=1 from
#      kcm-split's side is its rollback (step 6, KCM rendered from the original
#      ClusterConfiguration, the chart uninstalled);
#   5. runs the specs with the ginkgo CLI: the parallel ones on PROCS processes, then the
#      [Serial] ones on one; JUnit and JSON reports and the logs in
#      .test-logs/conformance-full/<side>/<part>/; the count per SIG printed and written as a
#      markdown table (summary.md there);
#   6. make kubeadm-down if it started the cluster, unless KEEP_UP=1.
# Needs root (kubeadm, the real kubelet). Not part of `make test`: the whole suite takes hours.
#   UPSTREAM=1     the baseline side (default: kcm-split's)
#   FOCUS=<re>     only the specs whose name matches (default: every [Conformance] spec)
#   SKIP=<re>      leave out the specs whose name matches (default: none)
#   PART=<name>    the part's directory name (default: all, or a name made of FOCUS)
#   PROCS=<n>      ginkgo processes for the parallel specs (default 4)
#   PHASES=...     "parallel serial" (default), or one of them
#   KEEP_UP=1      leave the cluster up afterwards, on its side (default: down if started here)
#   STANDINS=0     no stand-in images
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=deploy/local/lib.sh
source "$root/deploy/local/lib.sh"
# shellcheck source=deploy/local/node.sh
source "$root/deploy/local/node.sh"
# shellcheck source=deploy/kubeadm/kubeadm.sh
source "$root/deploy/kubeadm/kubeadm.sh"
cd "$root"

csay() { printf 'conformance-full: %s\n' "$*"; }
cdie() { printf 'conformance-full: ERROR: %s\n' "$*" >&2; exit 1; }

if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    exec sudo -n -E env "PATH=$PATH" bash "$0" "$@"
  fi
  cdie "conformance-full runs kubeadm, a real kubelet and containerd: run it as root"
fi

side=kcm-split
[ "${UPSTREAM:-}" != 1 ] || side=upstream
FOCUS=${FOCUS:-}
SKIP=${SKIP:-}
PROCS=${PROCS:-4}
PHASES=${PHASES:-parallel serial}
part=${PART:-}
if [ -z "$part" ]; then
  part=all
  # A readable directory name from the focus: its letters and digits, dashes between.
  [ -z "$FOCUS" ] || part=$(printf '%s' "$FOCUS" | tr -c 'A-Za-z0-9' '-' | tr -s '-' | sed 's/^-//; s/-$//' | cut -c1-60)
fi
out=$root/.test-logs/conformance-full/$side/$part
rm -rf "$out" && mkdir -p "$out"
log=$out/run.log
exec > >(tee "$log") 2>&1
teepid=$!
start=$SECONDS

lock=/tmp/kcm-split-node.lock
exec 9>"$lock"
flock -w 600 9 || cdie "$lock held for ten minutes (another run on the real node)"
csay "side $side, part $part, focus '${FOCUS:-every [Conformance] spec}', skip '${SKIP:-none}'; logs $out"

csay "building the tools, e2e.test, ginkgo, kubeadm's images, the controllers' images, kcm-split-plan"
bash deploy/tools/build.sh "$BIN" >/dev/null
TOOLS_ONLY="e2e.test ginkgo sample-apiserver" bash deploy/tools/build.sh "$BIN"
make -s kubeadm-images >/dev/null
tag=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
# -busybox-from-source: the busybox image's sh keeps env names like data-1 (the envFrom specs);
# the rebuilt binary is kept in bin/busybox-build/ and reused (no source fetch then). The
# Aggregator spec's sample-apiserver image only here: make images builds it when asked.
make -s images VERSION="$tag" IMAGES_FLAGS="-platforms linux/$(go env GOARCH) -busybox-from-source -sample-apiserver $BIN/sample-apiserver" >/dev/null
make -s plan
csay "built in $((SECONDS - start))s (controllers' images tagged $tag)"

started=0
rc=0
finish() {
  local code=$?
  set +e
  [ "$code" = 0 ] || rc=1
  [ -z "${loadpid:-}" ] || kill "$loadpid" 2>/dev/null
  ! ka_recorded || netguard_verdict conformance-full || rc=1
  if [ "$started" = 1 ] && [ "${KEEP_UP:-}" != 1 ]; then
    csay "make kubeadm-down"
    bash deploy/kubeadm/down.sh
  fi
  csay "done in $((SECONDS - start))s, exit $rc; logs $out"
  exec >&- 2>&-
  wait "$teepid" 2>/dev/null
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

if ka_recorded && kk get --raw=/readyz >/dev/null 2>&1; then
  csay "reusing the kubeadm cluster that runs ($KA_DIR)"
else
  ! ka_recorded || cdie "a kubeadm cluster is recorded in $KA_DIR but its apiserver does not answer: make kubeadm-down"
  t=$SECONDS
  bash deploy/kubeadm/up.sh
  started=1
  csay "make kubeadm-up took $((SECONDS - t))s"
fi
export KUBECONFIG=$KA_ADMIN PATH=$BIN:$PATH
# The images just built: the controllers' and the e2e images and stand-ins of make images
# (agnhost, busybox, nginx, nonewprivs, nautilus, kitten; sample-apiserver, asked for above).
# make kubeadm-up imported them when it started the cluster; a reused cluster has older ones (the
# chart and the kubelet pull nothing), and a rig fix in them must reach the next part.
for img in "$BIN"/images/*-controller.tar "$BIN"/images/{agnhost,busybox,nginx,nonewprivs,nautilus,kitten,sample-apiserver}.tar; do
  [ -f "$img" ] || cdie "no $img (make images)"
  nctr images import --no-unpack=false "$img" >/dev/null || cdie "importing $img failed"
done

# Stand-ins: e2e.test v1.36.3 asks for upstream's test images, which cannot be pulled here.
# nginx 1.27-0: the nginx 1.15-4 stand-in (agnhost serving HTTP on port 80, as nginx does);
# agnhost 2.55 (the previous version some specs name): agnhost 2.63.0;
# glibc-dns-testing 2.0.0 (the DNS specs' second prober, upstream's a Debian with dnsutils, given
# a `sh -c` of dig and getent probes): agnhost, whose userland is Debian's, dig and getent too.
# Tagged on the node only, where the kubelet finds them (IfNotPresent). The busybox image (Debian's
# busybox-static rebuilt to keep env names like data-1, every applet in /bin, `sh` by default),
# the Update Demo specs' nautilus and kitten stand-ins, the nonewprivs one and
# k8s.io/sample-apiserver v0.36.3 (the Aggregator spec's 1.29.2) are built under their own names
# (checked here).
if [ "${STANDINS:-}" != 0 ]; then
  have=$(nctr images ls -q)
  standin() { # image-on-the-node name-e2e.test-asks-for
    grep -qxF "$1" <<<"$have" || cdie "no $1 on the node (make images)"
    nctr images tag --force "$1" "$2" >/dev/null
    csay "stand-in: $2 is $1"
  }
  standin registry.k8s.io/e2e-test-images/agnhost:2.63.0 registry.k8s.io/e2e-test-images/agnhost:2.55
  standin registry.k8s.io/e2e-test-images/agnhost:2.63.0 registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0
  standin registry.k8s.io/e2e-test-images/nginx:1.15-4 registry.k8s.io/e2e-test-images/nginx:1.27-0
  for ref in registry.k8s.io/e2e-test-images/{busybox:1.37.0-1,nautilus:1.8,kitten:1.8,nonewprivs:1.4,sample-apiserver:1.29.2}; do
    grep -qxF "$ref" <<<"$have" || cdie "no $ref on the node (make images)"
  done
fi

# The runbook's settings, as make kubeadm-e2e gives them; its files in the cluster's directory
# (kubeadm-down removes them with the cluster).
work=$KA_DIR/conformance-full
mkdir -p "$work"
runbook_env=(KUBECONFIG="$KA_ADMIN" NS=kube-system RELEASE=kcm-split CHART="$root/charts/kcm-split"
  CONTROLLERS=all,servicelb WORK="$work")
runbook() { # BLOCK...: the runbook's blocks (after its helpers), as written in the chart README
  local script
  script=$(cd deploy/tests/kubeadm && go run ./cmd/runbook -readme "$root/charts/kcm-split/README.md" "$@")
  (cd "$work" && env "${runbook_env[@]}" bash -c "$script")
}
installed() { helm status kcm-split -n kube-system >/dev/null 2>&1; }

t=$SECONDS
if [ "$side" = kcm-split ]; then
  if installed && [ -f "$work/taken-over" ]; then
    csay "kcm-split is in charge already; checking every binary is active"
    runbook step-3-check
  else
    ! installed || cdie "a kcm-split release is installed but not by this script: helm uninstall it, or make kubeadm-down"
    csay "the runbook, steps 0 to 3: KCM's controllers to kcm-split"
    printf 'defaults:\n  image:\n    tag: "%s"\n    pullPolicy: Never\n  replicas: 1\n' "$tag" >"$work/site-values.yaml"
    # The runbook's step 1: a node whose name is not its host's is mapped (kubeadm-up names the
    # node kcm-split-node), or the binaries never take over from the new KCM (its Lease names the host).
    node=$("$BIN/kubectl" --kubeconfig "$KA_ADMIN" get nodes -o jsonpath='{.items[0].metadata.name}')
    host=$(hostname | tr '[:upper:]' '[:lower:]')
    [ -z "$node" ] || [ "$node" = "$host" ] ||
      printf 'takeOverFromKCM:\n  leaseHostNodes:\n    "%s": "%s"\n' "$host" "$node" >>"$work/site-values.yaml"
    runbook step-0
    runbook step-1
    runbook step-2 step-3-node
    runbook step-3-check
    touch "$work/taken-over"
  fi
else
  if [ -f "$work/taken-over" ]; then
    csay "the runbook's rollback (step 6): KCM runs every controller again, the chart uninstalled"
    runbook step-6 step-3-node
    runbook step-6-check
    runbook step-6-uninstall
    rm -f "$work/taken-over"
  fi
  ! installed || cdie "a kcm-split release is installed: the baseline runs without it"
  kcm=$(kk -n kube-system get pods -l component=kube-controller-manager -o jsonpath='{.items[*].spec.containers[0].command}')
  ctl=$(grep -o -- '--controllers=[^"]*' <<<"$kcm" || true)
  [[ "$ctl" != *,-* ]] || cdie "KCM has controllers off ($ctl): the baseline needs KCM running every one"
  csay "KCM: ${ctl:-every controller (no --controllers)}"
fi
csay "side $side ready in $((SECONDS - t))s"
kk get nodes -o wide

# The specs. e2e.test's flags: the cluster, its kubectl, no cloud; every node must be ready.
e2e_args=(--kubeconfig="$KA_ADMIN" --provider=skeleton --kubectl-path="$BIN/kubectl"
  --allowed-not-ready-nodes=0 --minStartupPods=0 --dns-domain=cluster.local)
ginkgo_args=(--no-color --timeout=12h --poll-progress-after=10m)
[ -z "$FOCUS" ] || ginkgo_args+=(--focus="$FOCUS")
[ -z "$SKIP" ] || ginkgo_args+=(--skip="$SKIP")
specs_start=$SECONDS
# The machine's load while the specs run: the 1-minute load average every 30 s.
(while :; do cut -d' ' -f1 /proc/loadavg; sleep 30; done) >"$out/load.txt" &
loadpid=$!
reports=()
for phase in $PHASES; do
  case $phase in
    parallel) filter='Conformance && !Serial' procs=$PROCS ;;
    serial) filter='Conformance && Serial' procs=1 ;;
    *) cdie "PHASES: $phase is neither parallel nor serial" ;;
  esac
  mkdir -p "$out/$phase"
  csay "$phase specs ($filter) on $procs process(es); log $out/$phase/ginkgo.log"
  t=$SECONDS
  prc=0
  "$BIN/ginkgo" "${ginkgo_args[@]}" --procs="$procs" --label-filter="$filter" \
    --output-dir="$out/$phase" --junit-report=junit.xml --json-report=report.json \
    "$BIN/e2e.test" -- "${e2e_args[@]}" >"$out/$phase/ginkgo.log" 2>&1 || prc=$?
  csay "$phase: ginkgo exited $prc after $((SECONDS - t))s; load $(uptime | sed 's/.*load average: //')"
  [ "$prc" = 0 ] || rc=1
  [ ! -f "$out/$phase/report.json" ] || reports+=("$out/$phase/report.json")
done
kill "$loadpid" 2>/dev/null || true
[ ${#reports[@]} -gt 0 ] || cdie "no report written (see the ginkgo logs)"
load=$(sort -n "$out/load.txt" | sed -n '1p;$p' | paste -sd' ' | awk '{print $1 " to " ($2 == "" ? $1 : $2)}')
{
  echo "side $side, part $part: $(date -u +%Y-%m-%dT%H:%MZ), commit $tag, specs $((SECONDS - specs_start))s, load average $load while they ran"
  echo
  (cd deploy/tools && GOWORK=off go run ./e2esummary -sig "${reports[@]}")
} | tee "$out/summary.md"
