package servicelb

import "sync"

// staleTracker remembers Service versions this controller has replaced by its own writes.
// The informer delivers a write's result a little later; until then the cache still shows
// the version before it, and a sync reading that would write the same change again.
type staleTracker struct {
	mu       sync.Mutex
	replaced map[string]map[string]bool // key -> resourceVersions
}

func newStaleTracker() *staleTracker {
	return &staleTracker{replaced: map[string]map[string]bool{}}
}

// replacedVersion records that version rv of key is outdated.
func (s *staleTracker) replacedVersion(key, rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replaced[key] == nil {
		s.replaced[key] = map[string]bool{}
	}
	s.replaced[key][rv] = true
}

// isStale reports whether rv of key is a version this controller has replaced. A version it
// has not replaced means the cache caught up, and older records are dropped.
func (s *staleTracker) isStale(key, rv string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replaced[key][rv] {
		return true
	}
	delete(s.replaced, key)
	return false
}

func (s *staleTracker) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.replaced, key)
}
