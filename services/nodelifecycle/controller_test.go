package nodelifecycle

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func fastOptions() Options {
	o := DefaultOptions()
	o.MonitorPeriod, o.MonitorGracePeriod, o.StartupGracePeriod = time.Second, 10*time.Second, 20*time.Second
	return o
}

// A silent Node turns Unknown exactly when its grace period ends; a pass before writes
// nothing, a pass after the write writes nothing more.
func TestPassMarksSilentNodeUnknownOnce(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, fastOptions(), readyNode("a", "z"), readyNode("b", "z"), readyNode("c", "z"))
	next := f.c.pass(ctx)
	if !next.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("next deadline = %s, want t0+10s", next)
	}
	f.clock.step(10 * time.Second)
	f.c.pass(ctx)
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("writes at the deadline itself: %v", w)
	}
	// a and c renew their Leases; b stays silent.
	f.c.health.observeLease(lease("a", f.clock.t))
	f.c.health.observeLease(lease("c", f.clock.t))
	f.clock.step(time.Millisecond)
	f.c.pass(ctx)
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
	if r := readyCondition(&b.Status); r.Reason != reasonStatusUnknown || r.Message != messageStatusUnknown || !r.LastHeartbeatTime.Equal(&metav1.Time{Time: t0}) {
		t.Errorf("ready condition = %+v", r)
	}
	if !hasEvent(f.events(), "NodeNotReady Node b status is now: NodeNotReady") {
		t.Error("no NodeNotReady event")
	}

	// Next pass over the written state: nothing to write, b queued for a NoExecute taint.
	f.refresh()
	f.client.ClearActions()
	f.c.pass(ctx)
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes on a pass with nothing to do: %v", w)
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

// Zone states follow the counts; rates follow the states; all zones down stops everything
// and removes NoExecute taints, and its end restarts every grace period.
func TestHandleDisruption(t *testing.T) {
	ctx := context.Background()
	o := fastOptions()
	o.LargeClusterThreshold = 5
	tainted := readyNode("t", "a")
	tainted.Spec.Taints = []v1.Taint{unreachableTaint}
	f := newFixture(t, o, tainted)
	f.c.ensureZone(ctx, "r:a")
	f.c.ensureZone(ctx, "r:b")
	rate := func(z string) float64 { return f.c.zone(z).tainter.Rate() }
	state := func(z string) ZoneState { return f.c.zone(z).state }

	f.c.handleDisruption(ctx, map[string]*zoneCount{"r:a": {ready: 10}, "r:b": {ready: 3}}, nil)
	if state("r:a") != StateNormal || rate("r:a") != 0.1 {
		t.Errorf("a: %s %g", state("r:a"), rate("r:a"))
	}
	// a: 6 of 10 down, large (10 > 5): secondary rate. b: 3 of 4 down, small: paused.
	f.c.handleDisruption(ctx, map[string]*zoneCount{"r:a": {ready: 4, notReady: 6}, "r:b": {ready: 1, notReady: 3}}, nil)
	if state("r:a") != StatePartialDisruption || rate("r:a") != 0.01 {
		t.Errorf("a: %s %g, want PartialDisruption 0.01", state("r:a"), rate("r:a"))
	}
	if state("r:b") != StatePartialDisruption || rate("r:b") != 0 {
		t.Errorf("b: %s %g, want PartialDisruption 0", state("r:b"), rate("r:b"))
	}
	evs := f.events()
	if !hasEvent(evs, "ZoneDisrupted Zone r:b is in PartialDisruption (3 of 4 Nodes not Ready): NoExecute tainting paused") ||
		!hasEvent(evs, "ZoneDisrupted Zone r:a is in PartialDisruption (6 of 10 Nodes not Ready): NoExecute tainting slowed to 0.01") {
		t.Errorf("events = %q", evs)
	}
	// b fully down while a is not: normal rate in b.
	f.c.handleDisruption(ctx, map[string]*zoneCount{"r:a": {ready: 10}, "r:b": {notReady: 4}}, nil)
	if state("r:b") != StateFullDisruption || rate("r:b") != 0.1 {
		t.Errorf("b: %s %g, want FullDisruption 0.1", state("r:b"), rate("r:b"))
	}
	// Everything down: stop, lift the taints.
	f.c.handleDisruption(ctx, map[string]*zoneCount{"r:a": {notReady: 10}, "r:b": {notReady: 4}}, []*v1.Node{tainted})
	if rate("r:a") != 0 || rate("r:b") != 0 || !f.c.allDown {
		t.Errorf("all down: rates %g %g, allDown %v", rate("r:a"), rate("r:b"), f.c.allDown)
	}
	if n := f.stored("t"); hasTaint(n.Spec.Taints, unreachableTaint) {
		t.Errorf("NoExecute taint kept in all-zones-down mode: %+v", n.Spec.Taints)
	}
	if !hasEvent(f.events(), "AllZonesDown") {
		t.Error("no AllZonesDown event")
	}
	// Back: rates per state, grace restarted.
	f.clock.step(time.Hour)
	f.c.handleDisruption(ctx, map[string]*zoneCount{"r:a": {ready: 1, notReady: 9}, "r:b": {notReady: 4}}, nil)
	if f.c.allDown || state("r:a") != StatePartialDisruption || rate("r:a") != 0.01 || rate("r:b") != 0.1 {
		t.Errorf("after: allDown %v, a %s %g, b %g", f.c.allDown, state("r:a"), rate("r:a"), rate("r:b"))
	}
	if h, _ := f.c.health.get("t"); !h.probe.Equal(f.clock.t) {
		t.Errorf("grace not restarted: probe %s", h.probe)
	}
}

// A Pod on an unreachable Node is marked not Ready with one patch pinned to its UID; a Pod
// not Ready already costs nothing.
func TestMarkPodsNotReady(t *testing.T) {
	ctx := context.Background()
	pod := func(name string, ready v1.ConditionStatus) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("u-" + name)},
			Spec:   v1.PodSpec{NodeName: "n"},
			Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: ready}}}}
	}
	f := newFixture(t, fastOptions(), pod("ready", v1.ConditionTrue), pod("notready", v1.ConditionFalse))
	if err := f.c.markPodsNotReady(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 1 || w[0] != "patch pods/status ready" {
		t.Errorf("writes = %v", w)
	}
	p, _ := f.client.CoreV1().Pods("ns").Get(ctx, "ready", metav1.GetOptions{})
	if p.Status.Conditions[0].Status != v1.ConditionFalse {
		t.Errorf("pod conditions = %+v", p.Status.Conditions)
	}
	if !hasEvent(f.events(), "NodeNotReady Node is not ready") {
		t.Error("no NodeNotReady event on the pod")
	}
}

// A kubelet reporting Ready=False gets the not-ready NoExecute taint through the zone queue;
// when its status turns Unknown the taint is swapped at once (the eviction decision stands),
// and when it is Ready again both go.
func TestNoExecuteFollowsReady(t *testing.T) {
	ctx := context.Background()
	n := readyNode("n", "z")
	n.Status.Conditions[0].Status = v1.ConditionFalse
	f := newFixture(t, fastOptions(), n, readyNode("m", "z"), readyNode("o", "z"))
	f.c.pass(ctx)
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
	f.c.pass(ctx)
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
	f.c.pass(ctx)
	if got := f.stored("n").Spec.Taints; len(got) != 0 {
		t.Errorf("taints = %+v, want none once Ready", got)
	}
}
