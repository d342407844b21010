package endpoints

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// triggerTracker computes the endpoints.kubernetes.io/last-change-trigger-time annotation:
// when the earliest not-yet-reflected change behind an Endpoints write happened. The
// network-programming-latency SLI subtracts it from the time a proxy programs the change,
// so it must name the cause of the write, not the write.
//
// The computation is k8s.io/endpointslice's TriggerTimeTracker: a Pod change is seen through
// its Ready condition's lastTransitionTime (kept by projectPod), a Service change through its
// creationTimestamp, and a Service it has not seen yet reports its creation time.
//
// That tracker takes a sync's state as reflected the moment it computes the time. A sync that
// then fails would lose its trigger: the retry sees nothing new and writes no annotation. So
// the time of a failed sync is kept here (retry) and folded into the next computation for
// the same Service, which reports the earlier of the two.
type triggerTracker struct {
	lib *endpointsliceutil.TriggerTimeTracker

	mu      sync.Mutex
	pending map[types.NamespacedName]time.Time // trigger times of failed syncs
}

func newTriggerTracker() *triggerTracker {
	return &triggerTracker{
		lib:     endpointsliceutil.NewTriggerTimeTracker(),
		pending: map[types.NamespacedName]time.Time{},
	}
}

// compute returns the trigger time for a write based on svc and the Pods its selector
// matches (zero: no new trigger). If the sync fails, the caller hands the time back with
// retry. The caller never computes for one Service concurrently (the work queue guarantees
// it), as the library requires.
func (t *triggerTracker) compute(svc *v1.Service, pods []*v1.Pod) time.Time {
	at := t.lib.ComputeEndpointLastChangeTriggerTime(svc.Namespace, svc, pods)
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.pending[key]; ok {
		delete(t.pending, key)
		if at.IsZero() || p.Before(at) {
			at = p
		}
	}
	return at
}

// retry keeps the trigger time of a failed sync of namespace/name for the next compute.
func (t *triggerTracker) retry(namespace, name string, at time.Time) {
	if at.IsZero() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending[types.NamespacedName{Namespace: namespace, Name: name}] = at
}

// forget drops the state of a deleted Service, so a new one of the same name starts afresh.
func (t *triggerTracker) forget(namespace, name string) {
	t.lib.DeleteService(namespace, name)
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pending, types.NamespacedName{Namespace: namespace, Name: name})
}
