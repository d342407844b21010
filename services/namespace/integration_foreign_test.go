package namespace_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/services/namespace"
	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// blockedNamespace is a terminating namespace this controller cannot finalize yet: a
// ConfigMap in it keeps a finalizer of nobody's.
func blockedNamespace(t *testing.T, client kubernetes.Interface, prefix string) *corev1.Namespace {
	t.Helper()
	ns := newNamespace(t, client, prefix)
	createConfigMaps(t, client, ns, 1, "example.com/keep")
	deleteNamespace(t, client, ns)
	waitCondition(t, client, ns, corev1.NamespaceFinalizersRemaining, "example.com/keep")
	cur, err := client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// TestForeignWritersOfNamespaces (issue 49, point 4): kube-controller-manager's namespace
// controller left running writes the conditions of a terminating namespace and finalizes
// another one before this controller could. Each is reported (a ForeignWriterDetected Event
// and the counter), and this controller does not fight either.
func TestForeignWritersOfNamespaces(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	ctx := context.Background()
	c := env.StartLeading(t, controller, "ctrl")
	const counter = `kcm_split_foreign_writer_detected_total{controller="namespace-controller"}`
	if got := c.Metric(counter); got != 0 {
		t.Fatalf("%s = %v at start, want 0", counter, got)
	}

	// Another writer finalizes a namespace this controller still waits on.
	finalized := blockedNamespace(t, client, "foreign-finalize")
	finalized.Spec.Finalizers = nil
	if _, err := client.CoreV1().Namespaces().Finalize(ctx, finalized, metav1.UpdateOptions{FieldManager: "kube-controller-manager"}); err != nil {
		t.Fatal(err)
	}
	// Gone at once, its ConfigMap left behind (what a finalize by hand leaks; this test
	// apiserver goes with the test binary).
	waitGone(t, client, finalized.Name)
	var evs []corev1.Event
	poll(t, time.Minute, "the finalize by another writer reported", func(context.Context) (bool, error) {
		evs = namespaceEvents(t, client, finalized.Name, foreign.Reason)
		return len(evs) > 0 && c.Metric(counter) == 1, nil
	})
	if !strings.Contains(evs[0].Message, "of finalize") {
		t.Fatalf("Event %q does not say it was a finalize", evs[0].Message)
	}

	// Another field manager writes the conditions of a terminating namespace.
	written := blockedNamespace(t, client, "foreign-conditions")
	written.Status.Conditions = append(written.Status.Conditions, corev1.NamespaceCondition{
		Type: "KCMWasHere", Status: corev1.ConditionTrue, Reason: "Test", LastTransitionTime: metav1.Now()})
	if _, err := client.CoreV1().Namespaces().UpdateStatus(ctx, written, metav1.UpdateOptions{FieldManager: "kube-controller-manager"}); err != nil {
		t.Fatal(err)
	}
	poll(t, time.Minute, "the conditions written by another manager reported", func(context.Context) (bool, error) {
		evs = namespaceEvents(t, client, written.Name, foreign.Reason)
		return len(evs) > 0 && c.Metric(counter) == 2, nil
	})
	if !strings.Contains(evs[0].Message, "kube-controller-manager") {
		t.Fatalf("Event %q does not name the manager", evs[0].Message)
	}
	// Not fought: this controller finalizes it once its content is gone, as usual.
	removeFinalizers(t, client, "configmaps", written.Name, "cm-00000")
	waitGone(t, client, written.Name)
	if n := len(namespaceEvents(t, client, written.Name, namespace.EventUpdateConflict)); n != 0 {
		t.Fatalf("%d UpdateConflict Events: the two writers fought", n)
	}
}
