package pvbinder

import (
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// assumed remembers the objects this controller wrote until its informer delivers them (or
// something newer). Reads merge it over the informer cache, so the next write is based on
// the version the API server just returned instead of an older cached one: without it, the
// second write of a bind (PV status after PV claimRef) would conflict whenever the informer
// lags, and a just-bound PV could look Available to the next claim.
type assumed[T metav1.Object] struct {
	mu   sync.Mutex
	objs map[string]T
}

func newAssumed[T metav1.Object]() *assumed[T] {
	return &assumed[T]{objs: map[string]T{}}
}

// version parses a resourceVersion. The API server's are etcd revisions, so a larger one is
// newer; anything unparsable counts as oldest, which makes the informer's copy win.
func version(o metav1.Object) uint64 {
	v, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// store records obj as written by this controller.
func (a *assumed[T]) store(key string, obj T) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.objs[key]; ok && version(old) > version(obj) {
		return
	}
	a.objs[key] = obj
}

// latest returns the newer of the informer's copy and the assumed one, dropping the
// assumed copy once the informer has caught up with it.
func (a *assumed[T]) latest(key string, cached T) T {
	a.mu.Lock()
	defer a.mu.Unlock()
	mine, ok := a.objs[key]
	if !ok {
		return cached
	}
	if version(cached) >= version(mine) {
		delete(a.objs, key)
		return cached
	}
	return mine
}

// forget drops what is known about a deleted object.
func (a *assumed[T]) forget(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.objs, key)
}

// waitingClaims are unbound claims whose last sync found no PV, oldest first. A PV that
// becomes Available wakes the oldest one it could serve, and every completed bind wakes the
// oldest of all, instead of every claim waiting for the periodic resync (upstream) or every
// claim being resynced on every PV change (quadratic).
type waitingClaims struct {
	mu     sync.Mutex
	claims map[string]time.Time // key -> creation time
}

func newWaitingClaims() *waitingClaims { return &waitingClaims{claims: map[string]time.Time{}} }

func (w *waitingClaims) add(key string, created time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.claims[key] = created
}

func (w *waitingClaims) remove(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.claims, key)
}

// takeOldest removes and returns the oldest waiting claim for which accept holds, or "".
func (w *waitingClaims) takeOldest(accept func(key string) bool) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	best := ""
	var bestAt time.Time
	for k, at := range w.claims {
		if best != "" && (at.After(bestAt) || (at.Equal(bestAt) && k > best)) {
			continue
		}
		if accept != nil && !accept(k) {
			continue
		}
		best, bestAt = k, at
	}
	if best != "" {
		delete(w.claims, best)
	}
	return best
}
