// Package kubeadm is `make kubeadm-e2e`: the move from kube-controller-manager (KCM) to
// kcm-split on a real kubeadm v1.36.3 cluster (deploy/kubeadm), done by running the command
// blocks of the chart README's kubeadm runbook ("Moving from kube-controller-manager on
// kubeadm") as written there, under the migration drill's churn: the take-over, a `kubeadm
// upgrade apply` at the same version, the trap (KCM rendered from the original
// ClusterConfiguration), the runbook's fix, and the rollback. Who wrote what is read from the
// apiserver's audit log.
//
// Runbook reads the README's marked blocks (`<!-- kubeadm-e2e: ID -->` before a ```sh fence);
// TakeOverEvents reads the binaries' take-over log lines and OurTerms turns them into the
// stretches each binary ran its controllers; LeaseLog records KCM's Lease and KCMTerms turns it
// into the stretches a KCM process may have led. The end-to-end test runs only with
// KCM_SPLIT_KUBEADM_E2E=1 (deploy/tests/kubeadm/e2e.sh sets it).
package kubeadm
