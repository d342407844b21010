package namespace_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestForeignWriterEpisodeHandover (issue 49): kube-controller-manager's namespace controller
// at it across a handover is one episode. Leader a reports its write of a terminating
// namespace's conditions and keeps the episode in <Lease name>-foreign-writers; a is killed
// with SIGKILL and b takes the Lease over; kube-controller-manager writes the conditions of
// another namespace: b, which read the episode before its informers started, does not report
// it, while a write of another manager after it is reported, so b did look.
func TestForeignWriterEpisodeHandover(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	ctx := context.Background()
	const lease = "namespace-handover-foreign"
	const counter = `kcm_split_foreign_writer_detected_total{controller="namespace-controller"}`
	store := lease + foreign.EpisodesSuffix
	testenv.DeleteKeptOnCleanup(t, client, store)
	args := append([]string{"--leader-elect-resource-name=" + lease}, testenv.ShortLeaseFlags()...)
	writeConditions := func(prefix, manager string) string {
		t.Helper()
		ns := blockedNamespace(t, client, prefix)
		ns.Status.Conditions = append(ns.Status.Conditions, corev1.NamespaceCondition{
			Type: "KCMWasHere", Status: corev1.ConditionTrue, Reason: "Test", LastTransitionTime: metav1.Now()})
		if _, err := client.CoreV1().Namespaces().UpdateStatus(ctx, ns, metav1.UpdateOptions{FieldManager: manager}); err != nil {
			t.Fatal(err)
		}
		return ns.Name
	}
	reported := func(ctrl *testenv.Controller, ns string) {
		t.Helper()
		poll(t, time.Minute, "the write in "+ns+" reported", func(context.Context) (bool, error) {
			return len(namespaceEvents(t, client, ns, foreign.Reason)) > 0 && ctrl.Metric(counter) >= 1, nil
		})
	}

	a := env.Start(t, controller, "a", args...)
	a.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	reported(a, writeConditions("handover-first", "kube-controller-manager"))
	var kept string
	poll(t, time.Minute, "the episode kept in "+store, func(ctx context.Context) (bool, error) {
		cm, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, store, metav1.GetOptions{})
		if err == nil {
			kept = cm.Data[foreign.EpisodesKey]
		}
		return strings.Contains(kept, `"manager":"kube-controller-manager"`), nil
	})

	a.Kill()
	b := env.Start(t, controller, "b", args...)
	b.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	second := writeConditions("handover-second", "kube-controller-manager")
	reported(b, writeConditions("handover-sentinel", "kubectl-edit"))
	if got, evs := b.Metric(counter), namespaceEvents(t, client, second, foreign.Reason); got != 1 || len(evs) != 0 {
		t.Fatalf("b reported kube-controller-manager's episode again: %s = %v (want 1, the sentinel's), %d Events in %s", counter, got, len(evs), second)
	}
}
