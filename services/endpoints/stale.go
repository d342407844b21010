package endpoints

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// staleTracker remembers, per Endpoints, the resourceVersion this controller last replaced
// with a write. Until the informer delivers the write, the lister still returns that old
// version, and computing from it would be wrong in the worst way: if the desired state has
// meanwhile gone back to what the old version says, the sync would find "nothing to do" and
// leave our newer write in place. Seeing a replaced version means "wait for the cache".
//
// Resource versions are opaque, so only equality with the replaced version is tested; that
// suffices because an update based on version V succeeds only if V was the latest.
type staleTracker struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName]string
}

func newStaleTracker() *staleTracker {
	return &staleTracker{replaced: map[types.NamespacedName]string{}}
}

// replacedVersion records that version rv of namespace/name was overwritten.
func (t *staleTracker) replacedVersion(namespace, name, rv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.replaced[types.NamespacedName{Namespace: namespace, Name: name}] = rv
}

// isStale reports whether version rv of namespace/name is one this controller overwrote.
func (t *staleTracker) isStale(namespace, name, rv string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.replaced[types.NamespacedName{Namespace: namespace, Name: name}]
	return ok && old == rv
}

// forget drops what is known about namespace/name, once its Service is gone.
func (t *staleTracker) forget(namespace, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.replaced, types.NamespacedName{Namespace: namespace, Name: name})
}
