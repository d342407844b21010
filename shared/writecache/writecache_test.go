package writecache

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func meta(rv string) *metav1.ObjectMeta { return &metav1.ObjectMeta{ResourceVersion: rv} }

// step is one call: wrote (key, replaced -> rv), latest (key, cached rv; want rv and stale),
// forget (key) or, with every field but key and len empty, a check of Len.
type step struct {
	op       string
	key      string
	replaced string // wrote: the version replaced
	rv       string // wrote: the result's version; latest: the cached version
	want     string // latest: the version returned
	stale    bool   // latest: the second result
	len      int    // len: the number of records
}

func wrote(key, replaced, rv string) step {
	return step{op: "wrote", key: key, replaced: replaced, rv: rv}
}
func latest(key, cached, want string, stale bool) step {
	return step{op: "latest", key: key, rv: cached, want: want, stale: stale}
}
func forget(key string) step { return step{op: "forget", key: key} }
func records(n int) step     { return step{op: "len", len: n} }

// Over 80 lines: most of it is the table of cases.
func TestCache(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{{
		name: "nothing written: the cached copy is current",
		steps: []step{
			latest("ns/s", "5", "5", false),
			records(0),
		},
	}, {
		name: "only the replaced version of that key is stale",
		steps: []step{
			wrote("ns/s", "5", "6"),
			latest("ns/t", "5", "5", false),    // another object
			latest("other/s", "5", "5", false), // another namespace
			latest("ns/s", "5", "6", true),     // the replaced version: our write is current
			latest("ns/s", "5", "6", true),     // and stays so until the cache moves
			latest("ns/s", "6", "6", false),    // caught up
			records(0),                         // the record went with it
			latest("ns/s", "5", "5", false),    // a relist showing an older version is believed
		},
	}, {
		name: "a cache that moved past our write is current",
		steps: []step{
			latest("ns/q", "10", "10", false),
			wrote("ns/q", "10", "11"),
			latest("ns/q", "10", "11", true),
			latest("ns/q", "12", "12", false), // someone wrote after us (admission charged)
			latest("ns/q", "10", "10", false), // the record was dropped with it
		},
	}, {
		name: "a chain of writes: every version replaced on the way is stale",
		steps: []step{
			wrote("pv", "1", "2"),
			wrote("pv", "2", "3"), // based on our own result while the informer lags
			latest("pv", "1", "3", true),
			latest("pv", "2", "3", true),
			latest("pv", "3", "3", false),
			records(0),
		},
	}, {
		name: "writes based on the same cached version: the earlier result is replaced too",
		steps: []step{
			wrote("ns/svc", "1", "2"), // unconditioned patches, both sent from version 1
			wrote("ns/svc", "1", "3"),
			latest("ns/svc", "2", "3", true),
			latest("ns/svc", "1", "3", true),
			latest("ns/svc", "3", "3", false),
		},
	}, {
		name: "a write the server made a no-op replaces nothing",
		steps: []step{
			wrote("ns/s", "5", "5"),
			records(0),
			latest("ns/s", "5", "5", false),
			wrote("ns/s", "5", "6"),
			wrote("ns/s", "6", "6"), // keeps the record of the real write
			latest("ns/s", "5", "6", true),
		},
	}, {
		name: "forget drops the record",
		steps: []step{
			wrote("ns/s", "5", "6"),
			wrote("ns/t", "5", "6"),
			forget("ns/s"),
			latest("ns/s", "5", "5", false),
			latest("ns/t", "5", "6", true),
			forget("ns/t"),
			records(0),
		},
	}, {
		name: "one record per key however many writes",
		steps: []step{
			wrote("a", "1", "2"), wrote("a", "2", "3"), wrote("b", "1", "2"), wrote("a", "3", "4"),
			records(2),
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := New[*metav1.ObjectMeta]()
			run(t, c, tc.steps)
		})
	}
}

func run(t *testing.T, c *Cache[*metav1.ObjectMeta], steps []step) {
	t.Helper()
	for i, s := range steps {
		switch s.op {
		case "wrote":
			c.Wrote(s.key, s.replaced, meta(s.rv))
		case "latest":
			got, stale := c.Latest(s.key, meta(s.rv))
			if got.ResourceVersion != s.want || stale != s.stale {
				t.Errorf("step %d: Latest(%s, cached %s) = %s, %v; want %s, %v", i, s.key, s.rv, got.ResourceVersion, stale, s.want, s.stale)
			}
		case "forget":
			c.Forget(s.key)
		case "len":
			if got := c.Len(); got != s.len {
				t.Errorf("step %d: %d records, want %d", i, got, s.len)
			}
		}
	}
}

// TestChainIsBounded: a key written over and over while the informer lags keeps only the
// newest replaced versions; a cache showing a forgotten one counts as current.
func TestChainIsBounded(t *testing.T) {
	c := New[*metav1.ObjectMeta]()
	const writes = maxReplaced + 4
	for i := 1; i <= writes; i++ {
		c.Wrote("k", strconv.Itoa(i), meta(strconv.Itoa(i+1)))
	}
	last := strconv.Itoa(writes + 1)
	oldestKept := strconv.Itoa(writes - maxReplaced + 1)
	run(t, c, []step{
		latest("k", oldestKept, last, true),
		latest("k", strconv.Itoa(writes), last, true),
		latest("k", strconv.Itoa(writes-maxReplaced), strconv.Itoa(writes-maxReplaced), false),
		records(0),
	})
}

// TestTypedObjects: the written object itself comes back, and the zero value works.
func TestTypedObjects(t *testing.T) {
	var c Cache[*v1.ResourceQuota]
	cached := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "q", ResourceVersion: "10"}}
	if got, stale := c.Latest("ns/q", cached); got != cached || stale {
		t.Fatal("nothing written: the cached object is current")
	}
	mine := cached.DeepCopy()
	mine.ResourceVersion = "11"
	c.Wrote("ns/q", cached.ResourceVersion, mine)
	if got, stale := c.Latest("ns/q", cached); got != mine || !stale {
		t.Fatal("the informer still shows the replaced version: our write is current")
	}
	if !c.Stale("ns/q", cached) {
		t.Fatal("Stale disagrees with Latest")
	}
	newer := cached.DeepCopy()
	newer.ResourceVersion = "12"
	if got, stale := c.Latest("ns/q", newer); got != newer || stale {
		t.Fatal("the informer moved on: its object is current")
	}
	if c.Stale("ns/q", cached) {
		t.Fatal("the record must be dropped once the informer moved on")
	}
}

// TestConcurrentKeys: keys written and read from many goroutines at once (run with -race),
// each key serialised as a work queue does, end with no records once every cache caught up.
func TestConcurrentKeys(t *testing.T) {
	c := New[*metav1.ObjectMeta]()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("ns/%d", g)
			for i := 1; i <= 200; i++ {
				from, to := strconv.Itoa(i), strconv.Itoa(i+1)
				c.Wrote(key, from, meta(to))
				if got, stale := c.Latest(key, meta(from)); !stale || got.ResourceVersion != to {
					t.Errorf("%s: cache at %s gave %s, %v", key, from, got.ResourceVersion, stale)
					return
				}
				if g%2 == 0 {
					c.Forget(key)
				} else if _, stale := c.Latest(key, meta(to)); stale {
					t.Errorf("%s: caught-up cache at %s still stale", key, to)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := c.Len(); n != 0 {
		t.Errorf("%d records left after every cache caught up", n)
	}
}
