# Local control plane: etcd, kube-apiserver, kube-scheduler, KCM minus what kcm-split replaces,
# kwok with 3 fake nodes, and every kcm-split controller. State in .local/ (git-ignored).
# Included by the root Makefile.

.PHONY: up down status clean-local node-up node-down

# ENDPOINTS_SHARDS=N runs endpoints-controller as N static shards of ENDPOINTS_SHARD_HASH
# (mixed or fnv; deploy/local/up.sh).
ENDPOINTS_SHARDS ?= 1
ENDPOINTS_SHARD_HASH ?= mixed

up: ## Start the local control plane with every kcm-split controller (builds what is missing); ENDPOINTS_SHARDS=2 shards endpoints-controller (ENDPOINTS_SHARD_HASH=mixed|fnv)
	@ENDPOINTS_SHARDS=$(ENDPOINTS_SHARDS) ENDPOINTS_SHARD_HASH=$(ENDPOINTS_SHARD_HASH) bash deploy/local/up.sh

down: ## Stop everything 'make up' started (logs stay in .local/logs)
	@bash deploy/local/down.sh

status: ## Show which local control-plane processes run, with their logs
	@bash deploy/local/status.sh

clean-local: down ## Stop the local control plane and delete .local/ (data, logs, PKI, kubeconfig)
	rm -rf .local

node-up: ## Add a real node (containerd, kubelet, kube-proxy; root) to a running `make up`; `make down` removes it
	@bash deploy/local/node-up.sh

node-down: ## Remove the real node of `make node-up`, and all it put on the machine; the control plane keeps running
	@bash deploy/local/node-down.sh
