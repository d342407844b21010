package pvbinder

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAssumedKeepsTheNewerVersion(t *testing.T) {
	a := newAssumed[*v1.PersistentVolume]()
	pv := func(rv string) *v1.PersistentVolume {
		return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: rv}}
	}
	a.store("a", pv("10"))
	if got := a.latest("a", pv("9")); got.ResourceVersion != "10" {
		t.Errorf("older cache won: %s", got.ResourceVersion)
	}
	a.store("a", pv("8")) // a late store of an older write changes nothing
	if got := a.latest("a", pv("9")); got.ResourceVersion != "10" {
		t.Errorf("older store won: %s", got.ResourceVersion)
	}
	if got := a.latest("a", pv("11")); got.ResourceVersion != "11" {
		t.Errorf("newer cache lost: %s", got.ResourceVersion)
	}
	// Caught up: the assumed copy is gone, so an informer that later shows an older
	// version (a relist after a restore) is believed.
	if got := a.latest("a", pv("3")); got.ResourceVersion != "3" {
		t.Errorf("stale assumed copy kept: %s", got.ResourceVersion)
	}
}

func TestWaitingClaimsOldestFirst(t *testing.T) {
	w := newWaitingClaims()
	base := time.Unix(1000, 0)
	w.add("ns/b", base.Add(time.Second))
	w.add("ns/a", base.Add(time.Second))
	w.add("ns/old", base)
	w.add("ns/new", base.Add(time.Minute))
	if got := w.takeOldest(func(k string) bool { return k != "ns/old" }); got != "ns/a" {
		t.Errorf("got %q, want ns/a (oldest accepted, name breaks the tie)", got)
	}
	if got := w.takeOldest(nil); got != "ns/old" {
		t.Errorf("got %q, want ns/old", got)
	}
	w.remove("ns/b")
	if got := w.takeOldest(nil); got != "ns/new" {
		t.Errorf("got %q, want ns/new", got)
	}
	if got := w.takeOldest(nil); got != "" {
		t.Errorf("got %q from an empty list", got)
	}
}

func TestKeyLocksSerialise(t *testing.T) {
	k := newKeyLocks()
	unlock := k.lock("a")
	done := make(chan struct{})
	go func() {
		u := k.lock("a")
		u()
		close(done)
	}()
	other := k.lock("b") // another key is not blocked
	other()
	select {
	case <-done:
		t.Fatal("second lock of the same key did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	<-done
	if len(k.locks) != 0 {
		t.Errorf("%d lock entries left", len(k.locks))
	}
}
