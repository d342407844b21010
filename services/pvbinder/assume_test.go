package pvbinder

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
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

// TestPVLockSerialisesSyncs: while a PV's lock is held (a claim worker binding it), a sync
// of that PV waits and writes nothing; a sync of another PV goes ahead.
func TestPVLockSerialisesSyncs(t *testing.T) {
	api := newAPIServer(makePV("pv-a", "1Gi", pvPhase(v1.VolumePending)), makePV("pv-b", "1Gi", pvPhase(v1.VolumePending)))
	f := newFixture(t, api)
	f.c.pvLocks.LockKey("pv-a")
	done := make(chan error, 1)
	go func() { done <- f.syncVolume("pv-a") }()

	other := make(chan error, 1)
	go func() { other <- f.syncVolume("pv-b") }()
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("sync pv-b: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a sync of pv-b waited for pv-a's lock")
	}
	if got := api.pv(t, "pv-b").Status.Phase; got != v1.VolumeAvailable {
		t.Fatalf("pv-b phase %s, want Available", got)
	}
	select {
	case err := <-done:
		t.Fatalf("a sync of pv-a ran while its lock was held (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	if got := api.pv(t, "pv-a").Status.Phase; got != v1.VolumePending {
		t.Fatalf("pv-a written to %s while its lock was held", got)
	}
	if err := f.c.pvLocks.UnlockKey("pv-a"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("sync pv-a: %v", err)
	}
	if got := api.pv(t, "pv-a").Status.Phase; got != v1.VolumeAvailable {
		t.Errorf("pv-a phase %s after the lock was released, want Available", got)
	}
}
