# A kubeadm v1.36.3 cluster of one node on this machine (root), as kcm-split's users run one:
# deploy/kubeadm/README.md. Included by the root Makefile.

.PHONY: kubeadm-up kubeadm-down

kubeadm-up: tools kubeadm-images images ## A one-node kubeadm v1.36.3 cluster on this machine (root): kubeadm init, static Pods on the real kubelet, CoreDNS and kube-proxy; KUBECONFIG=.local/kubeadm/admin.conf
	@bash deploy/kubeadm/up.sh

kubeadm-down: ## Remove the cluster of kubeadm-up and all it put on the machine (kubeadm reset, containers, images, links)
	@bash deploy/kubeadm/down.sh

.PHONY: kubeadm-e2e
kubeadm-e2e: ## The move from kube-controller-manager on a real kubeadm cluster by the chart README's kubeadm runbook (root; make images, kubeadm-up, the runbook under churn, upgrade, trap, rollback, kubeadm-down); log in .test-logs/kubeadm-e2e.log
	@bash deploy/tests/kubeadm/e2e.sh
