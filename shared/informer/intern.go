package informer

import "sync"

// Interner hands out one shared instance of equal values, named by a key that describes them
// completely. Projections use it for what many cached objects have in common (one workload's
// Pods: their labels, their ports, their resource totals): cached objects are never mutated,
// so equal ones can share one copy, and thousands of objects then cost one map or slice
// instead of one each. Go's unique package interns comparable values only, not maps or
// slices, hence this.
//
// Values are forgotten by generation, not by reference count: when the current generation
// holds limit values it becomes the previous one and the one before is dropped; a value found
// in the previous generation moves back to the current one. So at most twice limit values
// are remembered; a forgotten value stays valid for the objects holding it, and the next
// equal value simply starts a new shared instance. Safe for concurrent use.
type Interner[V any] struct {
	mu        sync.Mutex
	cur, prev map[string]V
	limit     int
}

// NewInterner returns an Interner remembering at most 2*limit values.
func NewInterner[V any](limit int) *Interner[V] {
	return &Interner[V]{cur: make(map[string]V), limit: limit}
}

// Get returns the shared value for key: the remembered one, or v, which is remembered.
func (t *Interner[V]) Get(key string, v V) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if got, ok := t.cur[key]; ok {
		return got
	}
	if got, ok := t.prev[key]; ok {
		v = got
	}
	if len(t.cur) >= t.limit {
		t.prev, t.cur = t.cur, make(map[string]V, len(t.cur))
	}
	t.cur[key] = v
	return v
}

// Len is the number of values remembered.
func (t *Interner[V]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cur) + len(t.prev)
}
