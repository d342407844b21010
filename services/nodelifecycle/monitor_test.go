package nodelifecycle

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A silent Node turns Unknown exactly when its grace period ends; a round before writes
// nothing, a round after the write writes nothing more.
func TestCheckAllNodesMarksSilentNodeUnknownOnce(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, fastOptions(), readyNode("a", "z"), readyNode("b", "z"), readyNode("c", "z"))
	next := f.c.checkAllNodes(ctx)
	if !next.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("next deadline = %s, want t0+10s", next)
	}
	f.clock.step(10 * time.Second)
	f.c.checkAllNodes(ctx)
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("writes at the deadline itself: %v", w)
	}
	// a and c renew their Leases; b stays silent.
	f.c.health.observeLease(lease("a", f.clock.t))
	f.c.health.observeLease(lease("c", f.clock.t))
	f.clock.step(time.Millisecond)
	f.c.checkAllNodes(ctx)
	if w := f.writes(); len(w) != 1 || w[0] != "patch nodes/status b" {
		t.Fatalf("writes = %v, want one status patch of b", w)
	}
	b := f.stored("b")
	for _, c := range b.Status.Conditions {
		want := v1.ConditionUnknown
		if c.Type == v1.NodeNetworkUnavailable {
			want = v1.ConditionFalse // not the kubelet's to report
		}
		if c.Status != want {
			t.Errorf("condition %s = %s, want %s", c.Type, c.Status, want)
		}
	}
	if r := nodeReadyCondition(&b.Status); r.Reason != reasonStatusUnknown || r.Message != messageStatusUnknown || !r.LastHeartbeatTime.Equal(&metav1.Time{Time: t0}) {
		t.Errorf("ready condition = %+v", r)
	}
	if !hasEvent(f.events(), "NodeNotReady Node b status is now: NodeNotReady") {
		t.Error("no NodeNotReady event")
	}

	// Next round over the written state: nothing to write, b queued for a NoExecute taint.
	f.refresh()
	f.client.ClearActions()
	f.c.checkAllNodes(ctx)
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes on a round with nothing to do: %v", w)
	}
	z := f.c.zone("r:\x00:z")
	if z.tainter.pending() != 1 {
		t.Fatalf("queued for tainting: %d, want 1", z.tainter.pending())
	}
	// After the settle wait the tainter applies it.
	f.clock.step(time.Second)
	name, ok := z.tainter.next(f.clock.t)
	if !ok || name != "b" {
		t.Fatalf("tainter next = %q %v", name, ok)
	}
	f.c.applyNoExecute(ctx, "r:\x00:z", z.tainter, name)
	if n := f.stored("b"); !hasTaint(n.Spec.Taints, unreachableTaint) {
		t.Errorf("taints = %+v, want unreachable NoExecute", n.Spec.Taints)
	}
}

// Every Node gets a RegisteredNode Event when a term starts tracking it, those present at
// start included, as upstream.
func TestRegisteredNodeForNodesPresentAtStart(t *testing.T) {
	f := newFixture(t, fastOptions(), readyNode("a", "z"), readyNode("b", "z"))
	f.c.checkAllNodes(context.Background())
	evs := f.events()
	for _, name := range []string{"a", "b"} {
		if !hasEvent(evs, "RegisteredNode Node "+name+" event: Registered Node "+name+" in Controller") {
			t.Errorf("no RegisteredNode Event for %s: %v", name, evs)
		}
	}
}
