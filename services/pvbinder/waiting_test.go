package pvbinder

import (
	"testing"
	"time"
)

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
