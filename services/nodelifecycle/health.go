package nodelifecycle

import (
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// health is what the controller knows of one Node's signs of life.
type health struct {
	// lastSignOfLife is the local time of the last sign of life: a new Ready heartbeat or Lease
	// renewal, as this process observed it. Local time, never the timestamps inside the
	// objects, so clock skew between the kubelet and this process cannot shorten or stretch
	// the grace period.
	lastSignOfLife time.Time
	// nodeSeen is false while only the Node's Lease has been observed.
	nodeSeen bool
	// hasReady: the Node has a Ready condition (it has reported at least once).
	hasReady bool
	// heartbeat is the Ready condition's lastHeartbeatTime last observed.
	heartbeat metav1.Time
	// renew is the Lease's renewTime last observed.
	renew time.Time
	// signs counts the signs of life observed; unlike lastSignOfLife, a restarted grace
	// period does not move it, so "has this Node shown life since then" is a comparison.
	signs uint64
}

// healthTracker records signs of life as the informers deliver them, so that a heartbeat
// counts from the moment it arrives rather than from the next periodic check. It is safe
// for concurrent use by event handlers and the monitor loop.
type healthTracker struct {
	mu    sync.Mutex
	nodes map[string]*health
	now   func() time.Time
}

func newHealthTracker(now func() time.Time) *healthTracker {
	return &healthTracker{nodes: map[string]*health{}, now: now}
}

// nodeReadyCondition returns the Ready condition of status itself, for reading or updating in
// place, or nil. (Not the endpoints projection's projectReadyCondition, which trims a Pod's.)
func nodeReadyCondition(status *v1.NodeStatus) *v1.NodeCondition {
	for i := range status.Conditions {
		if status.Conditions[i].Type == v1.NodeReady {
			return &status.Conditions[i]
		}
	}
	return nil
}

// observeNode records node's Ready heartbeat. It reports whether that counted as a sign of
// life.
func (t *healthTracker) observeNode(node *v1.Node) bool {
	ready := nodeReadyCondition(&node.Status)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.nodes[node.Name]
	if h == nil {
		h = &health{}
		t.nodes[node.Name] = h
	}
	alive := false
	switch {
	case !h.nodeSeen && ready == nil:
		// Never reported: the startup grace period runs from the Node's creation, unless a
		// Lease renewal was seen already.
		if created := node.CreationTimestamp.Time; created.After(h.lastSignOfLife) {
			h.lastSignOfLife = created
		}
	case !h.nodeSeen:
		// A Node seen for the first time (most often: this process just started leading)
		// gets a full grace period from now; the heartbeat in its status may be from
		// another clock.
		h.lastSignOfLife, alive = now, true
	case (ready != nil) != h.hasReady:
		// The Ready condition appeared (first report) or vanished (someone removed it).
		h.lastSignOfLife, alive = now, true
	case ready != nil && !ready.LastHeartbeatTime.Equal(&h.heartbeat):
		h.lastSignOfLife, alive = now, true
	}
	if alive {
		h.signs++
	}
	h.nodeSeen = true
	h.hasReady = ready != nil
	if ready != nil {
		h.heartbeat = ready.LastHeartbeatTime
	}
	return alive
}

// observeLease records a node Lease's renewal. It reports whether that counted as a sign of
// life (a renewTime later than the last one seen).
func (t *healthTracker) observeLease(lease *coordv1.Lease) bool {
	if lease.Spec.RenewTime == nil {
		return false
	}
	renew := lease.Spec.RenewTime.Time
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.nodes[lease.Name]
	if h == nil {
		h = &health{}
		t.nodes[lease.Name] = h
	}
	if !renew.After(h.renew) {
		return false
	}
	h.renew = renew
	h.lastSignOfLife = t.now()
	h.signs++
	return true
}

// get returns a copy of the record for name.
func (t *healthTracker) get(name string) (health, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.nodes[name]
	if !ok {
		return health{}, false
	}
	return *h, true
}

// forget drops a deleted Node.
func (t *healthTracker) forget(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.nodes, name)
}

// restartGrace gives every Node a fresh grace period from now: after all zones were down,
// the silence was most likely the control plane's network, not the Nodes.
func (t *healthTracker) restartGrace() {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range t.nodes {
		h.lastSignOfLife = now
	}
}

// deadline is when h's grace period ends.
func (o Options) deadline(h health) time.Time {
	if !h.hasReady {
		return h.lastSignOfLife.Add(o.StartupGracePeriod)
	}
	return h.lastSignOfLife.Add(o.MonitorGracePeriod)
}

// inherit makes the Node's last sign of life at, as a previous leader kept it, when this
// process has seen no other since: the Node has reported, and its Lease renewal and Ready
// heartbeat are still renew and heartbeat. at is taken only if it is earlier than this
// process's own last sign of life (never later, never in its future). It reports whether it
// was taken.
func (t *healthTracker) inherit(name string, at time.Time, renew, heartbeat *time.Time) bool {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.nodes[name]
	if h == nil || !h.hasReady || at.After(now) || !at.Before(h.lastSignOfLife) ||
		!sameTime(renew, h.renew) || !sameTime(heartbeat, h.heartbeat.Time) {
		return false
	}
	h.lastSignOfLife = at
	return true
}

// silentSince returns the last sign of life of every reported Node heard from no later than
// before, with its Lease renewal and Ready heartbeat as last observed.
func (t *healthTracker) silentSince(before time.Time) map[string]health {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]health{}
	for name, h := range t.nodes {
		if h.hasReady && !h.lastSignOfLife.After(before) {
			out[name] = *h
		}
	}
	return out
}
