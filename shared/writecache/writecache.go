// Package writecache covers the moment between a controller's own write and its informer
// delivering the result: until then the lister still returns the version the write replaced,
// and a sync computing from it would repeat the write, lose a conflict, or, worse, find
// "nothing to do" and leave a newer state behind. The controller records each successful
// write with Wrote and reads every cached object through Latest (or Stale).
package writecache

// No library serves: client-go's MutationCache orders resourceVersions as integers (the API
// makes them opaque), keeps at most 100 entries in an LRU that can evict one still needed, and
// wraps a whole Store, where these controllers only need "is this cached version one I replaced".

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxReplaced bounds the versions remembered per key. Writes chain while the informer lags
// (a sync reading our result writes again on top of it), a handful at most before the informer
// delivers one of them; beyond that the oldest is forgotten, and a cache still showing it is
// taken as current, as if nothing had been recorded.
const maxReplaced = 16

// Cache remembers, per key, the resourceVersions this process replaced by its own writes and
// the object its last write returned. A record goes when a read finds the cache showing any
// other version (the informer caught up, or someone wrote after us) and on Forget, which the
// controller calls when the object is deleted; so it holds at most one record per live object
// written and not read since.
//
// ResourceVersions are opaque, so they are compared by equality only. That is enough: a write
// replaces the version it was based on (an update conditioned on version V succeeds only while V
// is the latest), and the informer delivers versions in order, so a cache showing any version
// other than the replaced ones has moved past them (or shows a version someone else wrote just
// before an unconditioned patch of ours, which no caller can name): either way it is no longer
// known to be behind. Writes of one key must be recorded in the order they happened (serialised
// per key, as a work queue does): each write also replaces the result of the one before it.
//
// The zero value is ready to use. A Cache must not be copied after first use.
type Cache[T metav1.Object] struct {
	mu      sync.Mutex
	records map[string]*record[T]
}

type record[T metav1.Object] struct {
	replaced []string // oldest first
	result   T
}

// New returns an empty Cache.
func New[T metav1.Object]() *Cache[T] { return &Cache[T]{} }

// Wrote records that a write by this process replaced version replacedRV of key with result
// (the object the API server returned, never nil). A write that kept the version (the server
// found nothing to change) replaced nothing and is not recorded.
func (c *Cache[T]) Wrote(key, replacedRV string, result T) {
	rv := result.GetResourceVersion()
	if rv == replacedRV {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.records[key]
	if r == nil {
		if c.records == nil {
			c.records = map[string]*record[T]{}
		}
		r = &record[T]{}
		c.records[key] = r
	} else {
		// Our previous result is older than this write's, whatever the write was based on.
		r.add(r.result.GetResourceVersion())
	}
	r.add(replacedRV)
	r.replaced = slices.DeleteFunc(r.replaced, func(v string) bool { return v == rv })
	if n := len(r.replaced); n > maxReplaced {
		r.replaced = slices.Delete(r.replaced, 0, n-maxReplaced)
	}
	r.result = result
}

func (r *record[T]) add(rv string) {
	if rv != "" && !slices.Contains(r.replaced, rv) {
		r.replaced = append(r.replaced, rv)
	}
}

// Latest returns what to work from, given the informer's copy of key: while cached is a
// version this process replaced, the result of its last write and true (the cache is stale);
// otherwise cached and false, and the record of key is dropped, the informer having caught up
// or moved past it.
func (c *Cache[T]) Latest(key string, cached T) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.records[key]
	if !ok {
		return cached, false
	}
	if slices.Contains(r.replaced, cached.GetResourceVersion()) {
		return r.result, true
	}
	delete(c.records, key)
	return cached, false
}

// Stale reports whether cached is a version of key this process replaced: the second result
// of Latest, for a controller that waits for the informer rather than using the written object.
func (c *Cache[T]) Stale(key string, cached T) bool {
	_, stale := c.Latest(key, cached)
	return stale
}

// Forget drops the record of key; call it when the object is deleted.
func (c *Cache[T]) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.records, key)
}

// Len returns the number of keys with a record.
func (c *Cache[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.records)
}
