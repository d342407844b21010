package endpoints

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// triggerTracker computes the endpoints.kubernetes.io/last-change-trigger-time annotation:
// when the earliest not-yet-reflected change behind an Endpoints write happened. The
// network-programming-latency SLI subtracts it from the time a proxy programs the change,
// so it must name the cause of the write, not the write.
//
// A Pod change is seen through its Ready condition's lastTransitionTime, a Service change
// through its creationTimestamp (the only Service time the API keeps). Per Service it keeps
// the times seen at the last successful sync; a time newer than that is a change not yet
// reflected. Several changes of one object between two syncs show only as the last one, an
// approximation upstream accepts too.
type triggerTracker struct {
	mu     sync.Mutex
	states map[types.NamespacedName]triggerState
}

// triggerState is what one Service's last successful sync saw.
type triggerState struct {
	service time.Time
	pods    map[string]time.Time // by Pod name; the Service's namespace is implied
}

func newTriggerTracker() *triggerTracker {
	return &triggerTracker{states: map[types.NamespacedName]triggerState{}}
}

// compute returns the trigger time for a write based on svc and the Pods its selector
// matches (zero: no new trigger), and the state to store once the sync has succeeded.
// Storing only on success means a sync that fails and is retried reports the same trigger
// again instead of losing it.
//
// A Service never seen before (new, or the controller restarted) reports its creation time.
func (t *triggerTracker) compute(svc *v1.Service, pods []*v1.Pod) (time.Time, triggerState) {
	t.mu.Lock()
	prev, known := t.states[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}]
	t.mu.Unlock()

	next := triggerState{service: svc.CreationTimestamp.Time, pods: make(map[string]time.Time, len(pods))}
	var earliest time.Time
	changed := func(at time.Time) {
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	for _, pod := range pods {
		c := podReadyCondition(pod)
		if c == nil || c.LastTransitionTime.IsZero() {
			continue
		}
		at := c.LastTransitionTime.Time
		next.pods[pod.Name] = at
		if at.After(prev.pods[pod.Name]) {
			changed(at)
		}
	}
	if next.service.After(prev.service) {
		changed(next.service)
	}
	if !known {
		return svc.CreationTimestamp.Time, next
	}
	return earliest, next
}

// store records the state of a successful sync of namespace/name.
func (t *triggerTracker) store(namespace, name string, s triggerState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.states[types.NamespacedName{Namespace: namespace, Name: name}] = s
}

// forget drops the state of a deleted Service, so a new one of the same name starts afresh.
func (t *triggerTracker) forget(namespace, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.states, types.NamespacedName{Namespace: namespace, Name: name})
}
