package nodelifecycle

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

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
	if h, _ := f.c.health.get("t"); !h.lastSignOfLife.Equal(f.clock.t) {
		t.Errorf("grace not restarted: last sign of life %s", h.lastSignOfLife)
	}
}
