package pvbinder

import (
	"sync"
	"time"
)

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
