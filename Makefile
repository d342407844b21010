# kcm-split: one binary per kube-controller-manager controller.
# Every target works from a clean clone; `make tools` builds what the others need into bin/.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT     := $(abspath .)
BIN      := $(ROOT)/bin
MODULES  := shared $(patsubst %/go.mod,%,$(wildcard services/*/go.mod)) deploy/kubeadm/plan deploy/tests/chart deploy/tests/chart/dashboards deploy/tests/drills deploy/tests/kubeadm deploy/images deploy/tests/scale deploy/tests/lb
# One binary per services/<alias>/cmd/<name>.
CMDS     := $(wildcard services/*/cmd/*)
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/kcm-split/kcm-split/shared/app.Version=$(VERSION)
GOTEST_FLAGS ?= -race -count=1 -timeout=20m
export KCM_SPLIT_BIN_DIR := $(BIN)

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

include deploy/local/local.mk
include deploy/kubeadm/kubeadm.mk

.PHONY: tools
tools: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy, kwok, helm, staticcheck, prometheus, promtool into bin/ (skips what is present)
	@bash deploy/tools/build.sh $(BIN)

.PHONY: tools-test
tools-test: ## Build only what `make test` needs (etcd, kube-apiserver, staticcheck)
	@TOOLS_MINIMAL=1 bash deploy/tools/build.sh $(BIN)

.PHONY: build
build: ## Build every controller binary into bin/ (static, stripped: as shipped)
	@for c in $(CMDS); do \
		echo "build: bin/$$(basename $$c)"; \
		CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$$(basename $$c) ./$$c; \
	done

# Images: the commit's time is every image's creation time and every file's mtime, so the same
# commit and VERSION give the same digests.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)

.PHONY: images
images: ## OCI images without Docker into bin/images/: each controller (linux/amd64+arm64); pause, agnhost, busybox and the nginx, nonewprivs, nautilus, kitten stand-ins (node arch)
	@TOOLS_ONLY=agnhost bash deploy/tools/build.sh $(BIN)
	@cd deploy/images && GOWORK=off go run . -root $(ROOT) -out $(BIN)/images -version $(VERSION) \
		-revision "$(REVISION)" -epoch $(SOURCE_DATE_EPOCH) -agnhost $(BIN)/agnhost $(IMAGES_FLAGS)

.PHONY: kubeadm-images
kubeadm-images: ## kubeadm v1.36.3's images (control plane, etcd, kube-proxy, CoreDNS, pause) under kubeadm's names into bin/images/kubeadm/ (node arch)
	@TOOLS_ONLY="kubeadm etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy coredns" bash deploy/tools/build.sh $(BIN)
	@cd deploy/images && GOWORK=off go run . -root $(ROOT) -out $(BIN)/images/kubeadm -version $(VERSION) \
		-revision "$(REVISION)" -epoch $(SOURCE_DATE_EPOCH) -kubeadm $(BIN) $(IMAGES_FLAGS)

.PHONY: plan
plan: ## Build bin/kcm-split-plan: reads a running kube-controller-manager (manifest or Pods), prints the chart values carrying its flags and the --controllers turning its controllers off
	@echo "build: bin/kcm-split-plan"
	@cd deploy/kubeadm/plan && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o $(BIN)/kcm-split-plan ./cmd/kcm-split-plan

comma := ,
empty :=
space := $(empty) $(empty)
IMAGE_BINARIES := $(subst $(space),$(comma),$(notdir $(CMDS)))

.PHONY: images-push
images-push: ## Build the controllers' images and push them to ghcr.io/kcm-split/<binary>:$(VERSION) (the release workflow; after docker login)
	@cd deploy/images && GOWORK=off go run . -root $(ROOT) -out $(BIN)/images -version $(VERSION) \
		-revision "$(REVISION)" -epoch $(SOURCE_DATE_EPOCH) -only $(IMAGE_BINARIES) -push $(IMAGES_FLAGS)

.PHONY: test
test: tools lint helm-lint netguard-drill test-e2e dashboards-e2e test-go migration-drill chart-e2e lb-e2e ## Run lint and every test (unit, integration on a real apiserver, the network guard, make-up smoke, every dashboard panel on live data, the switch from KCM, the chart, then LoadBalancer traffic on a real node), all modules

.PHONY: netguard-drill
netguard-drill: ## The network guard (deploy/local/netguard.sh) fires when a local route is missing and nothing reaches the gateway: two network namespaces, 5 s (root; part of test)
	@bash deploy/local/netguard-drill.sh

.PHONY: test-go
test-go: ## Run go test -race in every module (needs bin/etcd and bin/kube-apiserver); logs in .test-logs/
	@bash deploy/ci/gotest.sh "$(GOTEST_FLAGS)" $(MODULES)

.PHONY: test-e2e
test-e2e: ## Smoke-test `make up`: a Deployment's Pods appear in its Endpoints, then `make down`
	@bash deploy/local/smoke.sh

.PHONY: chart-e2e
chart-e2e: tools ## The chart end to end on a real node (root): make up + node-up, install/upgrade/scale/uninstall, make down; figures in .test-logs/chart-e2e.log
	@bash deploy/tests/chart/e2e.sh

.PHONY: dashboards-e2e
dashboards-e2e: tools ## Every dashboard panel against live data: make up, Prometheus scraping each binary as the chart authorizes it, a workload, every query (about 5 minutes, make up 3 of them; part of test); log in .test-logs/dashboards-e2e.log
	@mkdir -p .test-logs
	@bash deploy/tests/chart/dashboards-e2e.sh 2>&1 | tee $(ROOT)/.test-logs/dashboards-e2e.log

.PHONY: lb-e2e
lb-e2e: tools ## LoadBalancer traffic on a real node (root): MetalLB's speaker, a client netns reaching the address by ARP; MetalLB's controller, then service-lb (LB_E2E_CONTROLLERS); figures in .test-logs/lb-e2e.log
	@LB_E2E_CONTROLLERS="$(LB_E2E_CONTROLLERS)" bash deploy/tests/lb/e2e.sh

.PHONY: test-unit
test-unit: ## Run only the unit tests (-short skips the real control plane)
	@for m in $(MODULES); do (cd $$m && go test -short $(GOTEST_FLAGS) ./...); done

.PHONY: generate
generate: ## Regenerate shared/features' table of kube-controller-manager v1.36's feature gates
	@cd deploy/tools && $(FEATUREGATES) > $(ROOT)/$(GATES_TABLE)

# The table of gates is generated from k8s.io/kubernetes by the tools module (built as the tools are).
FEATUREGATES := GOWORK=off CGO_ENABLED=0 go run -trimpath ./featuregates
GATES_TABLE  := shared/features/zz_generated.gates.go

.PHONY: lint
lint: ## gofmt, go vet and staticcheck on every module; each service also builds alone (GOWORK=off); generated files current; actionlint
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@cd deploy/tools && $(FEATUREGATES) | diff -u $(ROOT)/$(GATES_TABLE) - || { echo "$(GATES_TABLE) is stale: run make generate"; exit 1; }
	@for m in $(MODULES); do \
		echo "== lint $$m"; \
		gowork=$$(grep -qE "^\s*\./$$m/?\s*$$" go.work || echo off); \
		(cd $$m && GOWORK=off go build ./... && GOWORK=$$gowork go vet ./... && GOWORK=$$gowork $(BIN)/staticcheck ./...); \
	done
	@TOOLS_ONLY=actionlint bash deploy/tools/build.sh $(BIN) >/dev/null
	@echo "== actionlint .github/workflows" && $(BIN)/actionlint

.PHONY: migration-drill
migration-drill: tools ## The switch from kube-controller-manager to kcm-split and back, as a drill (about 4 minutes; part of test); log in .test-logs/migration-drill.log
	@mkdir -p .test-logs
	@rc=0; (cd deploy/tests/drills && KCM_SPLIT_MIGRATION_DRILL=1 go test -count=1 -v -run '^TestMigrationDrill$$' -timeout 30m ./migration/) 2>&1 \
		| tee $(ROOT)/.test-logs/migration-drill.log || rc=$$?; \
		grep '^migration: ' $(ROOT)/.test-logs/migration-drill.log | tail -1; exit $$rc

.PHONY: scale
SIZE ?= S
scale: tools ## Scale run (not part of test): each controller vs upstream KCM at SIZE=S|M|L (XS: a quick check); results in deploy/tests/scale/results-<SIZE>.md
	@cd deploy/tests/scale && SCALE_SIZE=$(SIZE) SCALE_OUT=$(ROOT)/deploy/tests/scale SCALE_CONTROLLERS=$(CONTROLLERS) SCALE_OURS_ONLY=$(OURS_ONLY) go test -count=1 -v -run '^TestScale$$' -timeout 120m .

.PHONY: scale-shards
SHARDS   ?= 1,2,4
GATE     ?= on
HASH     ?= mixed
CAPACITY ?= on
scale-shards: tools ## Sharded scale run (not part of test): endpoints and quota as N=SHARDS shards (1,2,4) at SIZE with --shard-hash HASH=mixed|fnv|fnv,mixed, apiserver gate ShardedListAndWatch GATE=on|off, CAPACITY=off skips the capacity ramp; deploy/tests/scale/results-<SIZE>-shards-gate-<GATE>-hash-<HASH>.md
	@cd deploy/tests/scale && SCALE_SIZE=$(SIZE) SCALE_OUT=$(ROOT)/deploy/tests/scale SCALE_SHARDS=$(SHARDS) SCALE_GATE=$(GATE) SCALE_SHARD_HASH=$(HASH) SCALE_CAPACITY=$(CAPACITY) SCALE_CONTROLLERS=$(CONTROLLERS) go test -count=1 -v -run '^TestShards$$' -timeout 150m .

.PHONY: scale-floor
scale-floor: tools ## Memory of each process on an empty cluster (the floor before any cache): smallest client-go program, with and without the clientset, namespace-controller, upstream; deploy/tests/scale/results-floor.md
	@cd deploy/tests/scale && SCALE_FLOOR=1 SCALE_OUT=$(ROOT)/deploy/tests/scale go test -count=1 -v -run '^TestFloor$$' -timeout 20m .

.PHONY: tidy
tidy: ## go mod tidy in every module (and the tools module)
	@for m in $(MODULES) deploy/tools deploy/tools/prometheus; do (cd $$m && GOWORK=off go mod tidy); done

.PHONY: bench
BENCHES := $(patsubst %/bench/,%,$(dir $(wildcard services/*/bench/*_test.go)))
bench: tools ## Every controller's benchmark against the real apiserver (services/*/bench; BENCH=<alias> runs one)
	@for m in $(if $(BENCH),services/$(BENCH),$(sort $(BENCHES))); do \
		echo "== bench $$m"; \
		(cd $$m && go test -run '^$$' -bench . -benchtime 1x -timeout 60m ./bench/...); \
	done

.PHONY: conformance
conformance: tools ## Upstream's e2e specs for these controllers (e2e.test v1.36.3) against make up; pass/fail per spec (not in make test)
	@bash deploy/tests/conformance/run.sh

.PHONY: conformance-full
conformance-full: ## Every [Conformance] spec of e2e.test v1.36.3 (ginkgo: parallel, then [Serial]) on the kubeadm cluster with kcm-split in charge (root; UPSTREAM=1: KCM alone; FOCUS/SKIP/PART; deploy/conformance/README.md; not in make test)
	@bash deploy/conformance/run.sh

.PHONY: helm-lint
helm-lint: tools ## Lint the Helm chart: helm lint, template each controller alone and all, schema rejects bad values
	@bash deploy/tests/chart/helm-lint.sh $(BIN)

.PHONY: clean
clean: ## Remove built controller binaries (keeps the tools)
	@for c in $(CMDS); do rm -f $(BIN)/$$(basename $$c); done
	@rm -f $(BIN)/kcm-split-plan
