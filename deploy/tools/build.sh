#!/usr/bin/env bash
# Builds the real control plane and helper tools into bin/ (git-ignored), skipping what is present.
# Usage: deploy/tools/build.sh [BIN_DIR]
# TOOLS_ONLY="name ..." builds only those (make images: agnhost; make lint: staticcheck actionlint;
# make lb-e2e: metallb-controller metallb-speaker; make kubeadm-images: kubeadm etcd kube-apiserver
# kube-controller-manager kube-scheduler kube-proxy coredns; make conformance and
# conformance-full: e2e.test, and ginkgo; conformance-full: sample-apiserver).
# Everything comes from the Go module proxy; nothing else is downloaded.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-$root/bin}
mkdir -p "$bin"
bin=$(cd "$bin" && pwd)

K8S_VERSION=v1.36.3
KWOK_VERSION=v0.8.0
HELM_VERSION=v4.3.1
STATICCHECK_VERSION=v0.8.2
ACTIONLINT_VERSION=v1.7.12
# Static binaries, as the Kubernetes release builds them.
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0

pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=36 -X $pkg.gitTreeState=clean"

wanted() { [ -z "${TOOLS_ONLY:-}" ] || [[ " $TOOLS_ONLY " == *" $1 "* ]]; }

build() { # name package [ldflags]
  local name=$1 p=$2 flags=${3:-"-s -w"}
  wanted "$name" || return 0
  if [ -x "$bin/$name" ]; then echo "tools: $name present, skipping"; return; fi
  echo "tools: building $name ($p)"
  local start=$SECONDS
  (cd "$here" && go build -trimpath -ldflags "$flags" -o "$bin/$name.tmp" "$p")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "tools: built $name in $((SECONDS - start))s"
}

install() { # name module@version
  local name=$1 p=$2
  wanted "$name" || return 0
  if [ -x "$bin/$name" ]; then echo "tools: $name present, skipping"; return; fi
  echo "tools: installing $name ($p)"
  GOBIN="$bin" go install -trimpath -ldflags "-s -w" "$p"
}

# build_in DIR name package tags [ldflags]: like build, from the module in deploy/tools/DIR (its own versions).
build_in() {
  local dir=$1 name=$2 p=$3 tags=${4:-} flags="-s -w ${5:-}"
  wanted "$name" || return 0
  if [ -x "$bin/$name" ]; then echo "tools: $name present, skipping"; return; fi
  echo "tools: building $name ($p)"
  local start=$SECONDS
  (cd "$here/$dir" && go build -trimpath -tags "$tags" -ldflags "$flags" -o "$bin/$name.tmp" "$p")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "tools: built $name in $((SECONDS - start))s"
}

build etcd go.etcd.io/etcd/server/v3
install staticcheck "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
install actionlint "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
# The rest is needed by `make up` (and the chart tests), not by `make test`'s integration tests.
if [ "${TOOLS_MINIMAL:-}" != "1" ] || [ -n "${TOOLS_ONLY:-}" ]; then
  build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$ldflags"
  build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$ldflags"
  build kubectl k8s.io/kubernetes/cmd/kubectl "$ldflags"
  # The real node of `make node-up` / `make chart-e2e` (deploy/node).
  build kubelet k8s.io/kubernetes/cmd/kubelet "$ldflags"
  build kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$ldflags"
  # The kubeadm cluster (make kubeadm-up): kubeadm itself; its images come from make kubeadm-images.
  build kubeadm k8s.io/kubernetes/cmd/kubeadm "$ldflags"
  build tcpforward ./tcpforward
  install kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  install helm "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  # Prometheus v3 (the dashboards' live test) and promtool (the alerts' unit tests). Scrape
  # targets are static in those tests: remove_all_sd leaves out the cloud service discoveries.
  promver="-X github.com/prometheus/common/version.Version=3.16.0"
  build_in prometheus prometheus github.com/prometheus/prometheus/cmd/prometheus remove_all_sd "$promver"
  build_in prometheus promtool github.com/prometheus/prometheus/cmd/promtool remove_all_sd "$promver"
  # kwok has no default stages: keep the ones its module ships beside the binary.
  if wanted kwok && [ ! -d "$bin/kwok-stages" ]; then
    src=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
    [ -d "$src" ] || (cd "$here" && go mod download -x "sigs.k8s.io/kwok@$KWOK_VERSION" >/dev/null 2>&1) || true
    mkdir -p "$bin/kwok-stages"
    for d in node/fast node/heartbeat-with-lease pod/fast; do
      for f in "$src/$d/"*.yaml; do
        [ "$(basename "$f")" = kustomization.yaml ] && continue
        cp "$f" "$bin/kwok-stages/"
      done
    done
    chmod -R u+w "$bin/kwok-stages"
  fi
fi
# Upstream's e2e test server (Services, EndpointSlices with real Pods): only when asked for by
# name (make images wraps it in an image), so that make tools and make test do not build it.
if [[ " ${TOOLS_ONLY:-} " == *" agnhost "* ]]; then
  build agnhost k8s.io/kubernetes/test/images/agnhost
fi
# MetalLB v0.15.2's controller and speaker (make lb-e2e wraps them in images): only when asked for.
if [[ " ${TOOLS_ONLY:-} " == *" metallb-controller "* ]]; then
  build_in metallb metallb-controller go.universe.tf/metallb/controller
fi
if [[ " ${TOOLS_ONLY:-} " == *" metallb-speaker "* ]]; then
  build_in metallb metallb-speaker go.universe.tf/metallb/speaker
fi
# Upstream's e2e suite (make conformance, make conformance-full): e2e.test v1.36.3, and the
# ginkgo CLI that runs it on parallel nodes. Only when asked for by name: several minutes the
# first time. Both are built in the tools module with k8s.io/kubernetes v1.36.3's build list, so
# ginkgo is the version that module requires (checked: the CLI refuses a suite of another one).
# Their packages' test-only and CLI-only imports are outside the tools module's build list, so
# `go mod tidy` drops their checksums: they are resolved for these builds only (-mod=mod) and the
# tracked go.mod and go.sum put back afterwards.
build_modmod() { # name package [ldflags]: `build` with go test -c for a .test name
  local name=$1 p=$2 flags=${3:-"-s -w"} keep rc=0 start=$SECONDS
  [[ " ${TOOLS_ONLY:-} " == *" $name "* ]] || return 0
  if [ -x "$bin/$name" ]; then echo "tools: $name present, skipping"; return; fi
  echo "tools: building $name ($p; several minutes the first time)"
  keep=$(mktemp -d)
  cp "$here/go.mod" "$here/go.sum" "$keep/"
  if [[ "$name" == *.test ]]; then
    (cd "$here" && GOFLAGS=-mod=mod go test -c -trimpath -ldflags "$flags" -o "$bin/$name.tmp" "$p") || rc=$?
  else
    (cd "$here" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$flags" -o "$bin/$name.tmp" "$p") || rc=$?
  fi
  cp "$keep/go.mod" "$keep/go.sum" "$here/" && rm -rf "$keep"
  [ "$rc" = 0 ] || exit "$rc"
  mv "$bin/$name.tmp" "$bin/$name"
  echo "tools: built $name in $((SECONDS - start))s"
}
build_modmod e2e.test k8s.io/kubernetes/test/e2e "-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=36"
# k8s.io/sample-apiserver v0.36.3 (the tools module replaces it to that version), the aggregated
# API server of the Aggregator spec, which make conformance-full wraps in an image: only when
# asked for. Its main package's imports are outside the tools module's build list too.
build_modmod sample-apiserver k8s.io/sample-apiserver "$ldflags"
if [[ " ${TOOLS_ONLY:-} " == *" ginkgo "* ]] && [ ! -x "$bin/ginkgo" ]; then
  k8smod=$(cd "$here" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  want=$(awk '$1 == "github.com/onsi/ginkgo/v2" {print $2; exit}' "$k8smod")
  have=$(cd "$here" && GOFLAGS=-mod=mod go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
  [ -n "$want" ] && [ "$want" = "$have" ] ||
    { echo "tools: ginkgo: k8s.io/kubernetes $K8S_VERSION requires ${want:-none}, the tools module selects $have" >&2; exit 1; }
  build_modmod ginkgo github.com/onsi/ginkgo/v2/ginkgo
fi
# CoreDNS v1.14.2, kubeadm v1.36.3's cluster DNS (make kubeadm-images wraps it in an image): only
# when asked for.
if [[ " ${TOOLS_ONLY:-} " == *" coredns "* ]]; then
  build_in coredns coredns github.com/coredns/coredns
fi
echo "tools: done ($bin)"
