package nodelifecycle

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A kubelet reporting Ready=False gets the not-ready NoExecute taint through the zone queue;
// when its status turns Unknown the taint is swapped at once (the eviction decision stands),
// and when it is Ready again both go.
func TestNoExecuteFollowsReady(t *testing.T) {
	ctx := context.Background()
	n := readyNode("n", "z")
	n.Status.Conditions[0].Status = v1.ConditionFalse
	f := newFixture(t, fastOptions(), n, readyNode("m", "z"), readyNode("o", "z"))
	f.c.checkAllNodes(ctx)
	z := f.c.zone("r:\x00:z")
	f.clock.step(time.Second)
	name, ok := z.tainter.next(f.clock.t)
	if !ok || name != "n" {
		t.Fatalf("queued = %q %v, want n", name, ok)
	}
	f.c.applyNoExecute(ctx, "r:\x00:z", z.tainter, name)
	if got := f.stored("n").Spec.Taints; !hasTaint(got, notReadyTaint) || hasTaint(got, unreachableTaint) {
		t.Fatalf("taints = %+v, want not-ready NoExecute", got)
	}

	f.refresh()
	n = f.stored("n")
	n.Status.Conditions[0].Status = v1.ConditionUnknown
	if _, err := f.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.refresh()
	f.c.checkAllNodes(ctx)
	if got := f.stored("n").Spec.Taints; hasTaint(got, notReadyTaint) || !hasTaint(got, unreachableTaint) {
		t.Fatalf("taints = %+v, want unreachable NoExecute only", got)
	}
	if z.tainter.pending() != 0 {
		t.Error("a swapped node was queued again")
	}

	n = f.stored("n")
	n.Status.Conditions[0].Status = v1.ConditionTrue
	if _, err := f.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.refresh()
	f.c.checkAllNodes(ctx)
	if got := f.stored("n").Spec.Taints; len(got) != 0 {
		t.Errorf("taints = %+v, want none once Ready", got)
	}
}
