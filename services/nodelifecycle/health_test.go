package nodelifecycle

import (
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time       { return c.t }
func (c *fakeClock) step(d time.Duration) { c.t = c.t.Add(d) }
func heartbeatNode(name string, hb time.Time) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
		{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(hb)},
	}}}
}

func lease(name string, renew time.Time) *coordv1.Lease {
	r := metav1.NewMicroTime(renew)
	return &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordv1.LeaseSpec{RenewTime: &r}}
}

func TestHealthTracker(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tr := newHealthTracker(clock.now)
	o := Options{MonitorGracePeriod: 40 * time.Second, StartupGracePeriod: time.Minute}
	t0 := clock.t
	// A Node first seen gets a full grace period from now, whatever its heartbeat says
	// (it may come from a skewed clock).
	tr.observeNode(heartbeatNode("n", t0.Add(-time.Hour)))
	h, _ := tr.get("n")
	if got := o.deadline(h); !got.Equal(t0.Add(40 * time.Second)) {
		t.Errorf("deadline = %s, want t0+40s", got)
	}
	// The same heartbeat again (a resync, or our own status write) is no sign of life.
	clock.step(10 * time.Second)
	if tr.observeNode(heartbeatNode("n", t0.Add(-time.Hour))) {
		t.Error("an unchanged heartbeat counted")
	}
	// A Lease renewal is, from the moment it is seen.
	if !tr.observeLease(lease("n", t0)) {
		t.Error("a first renewal did not count")
	}
	h, _ = tr.get("n")
	if got := o.deadline(h); !got.Equal(clock.t.Add(40 * time.Second)) {
		t.Errorf("deadline after renewal = %s", got)
	}
	clock.step(time.Second)
	if tr.observeLease(lease("n", t0)) || tr.observeLease(lease("n", t0.Add(-time.Second))) {
		t.Error("an old renewal counted")
	}
	// A new heartbeat counts.
	clock.step(time.Second)
	if !tr.observeNode(heartbeatNode("n", t0.Add(time.Minute))) {
		t.Error("a new heartbeat did not count")
	}
	// All zones down, then back: every Node starts over.
	clock.step(time.Hour)
	tr.restartGrace()
	h, _ = tr.get("n")
	if !h.lastSignOfLife.Equal(clock.t) {
		t.Errorf("lastSignOfLife after restartGrace = %s, want now", h.lastSignOfLife)
	}
	tr.forget("n")
	if _, ok := tr.get("n"); ok {
		t.Error("forgotten node still tracked")
	}
}

func TestHealthNeverReported(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tr := newHealthTracker(clock.now)
	o := Options{MonitorGracePeriod: 40 * time.Second, StartupGracePeriod: time.Minute}
	created := clock.t.Add(-20 * time.Second)
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "new", CreationTimestamp: metav1.NewTime(created)}}
	tr.observeNode(n)
	h, _ := tr.get("new")
	// The startup grace period runs from the Node's creation.
	if got := o.deadline(h); !got.Equal(created.Add(time.Minute)) {
		t.Errorf("deadline = %s, want creation + 1m", got)
	}
	// First report: from now, with the normal grace period.
	clock.step(5 * time.Second)
	if !tr.observeNode(heartbeatNode("new", clock.t)) {
		t.Error("the first report did not count")
	}
	h, _ = tr.get("new")
	if got := o.deadline(h); !got.Equal(clock.t.Add(40 * time.Second)) {
		t.Errorf("deadline = %s, want now + 40s", got)
	}
}
