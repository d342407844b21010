package pvbinder

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
)

func TestResyncWritesNothing(t *testing.T) {
	api := newAPIServer(makePV("a", "1Gi"), makeClaim("c", "1Gi"), makePV("spare", "1Gi"),
		makePV("released", "1Gi", pvRef("gone", "uid-gone"), pvPhase(v1.VolumeReleased)))
	f := newFixture(t, api)
	f.settle()
	before, _ := api.counts()
	f.settle()
	if after, _ := api.counts(); after != before {
		t.Errorf("a resync wrote %d times", after-before)
	}
}

// TestConcurrentBindersNeverDoubleBind runs two binder processes (separate caches, as after
// a leader change where the old leader is still finishing), each with several workers,
// against one API server with real resourceVersion preconditions, over claims and PVs in
// random order with caches that lag. Every claim must end bound to exactly one PV and every
// PV to at most one claim.
func TestConcurrentBindersNeverDoubleBind(t *testing.T) {
	const n = 40
	var objs []runtime.Object
	for i := range n {
		objs = append(objs, makePV(fmt.Sprintf("pv-%02d", i), fmt.Sprintf("%dGi", 1+i%3)), makeClaim(fmt.Sprintf("c-%02d", i), "1Gi"))
	}
	api := newAPIServer(objs...)
	binders := []*fixture{newFixture(t, api), newFixture(t, api)}

	var mu sync.Mutex // catchUp replaces a whole cache; one at a time per fixture
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	for bi, f := range binders {
		for w := range 4 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(bi), uint64(w)))
				for time.Now().Before(deadline) {
					if allBound(api, n) {
						return
					}
					if r.IntN(4) == 0 {
						mu.Lock()
						f.catchUp()
						mu.Unlock()
					}
					i := r.IntN(n)
					if r.IntN(3) == 0 {
						_ = f.syncVolume(fmt.Sprintf("pv-%02d", i))
					} else {
						_ = f.syncClaim(fmt.Sprintf("c-%02d", i))
					}
				}
			})
		}
	}
	wg.Wait()
	if !allBound(api, n) {
		t.Fatal("not every claim bound within 60s")
	}
	binders[0].settle() // clean up reservations left by lost races
	seen := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("c-%02d", i)
		c := api.claim(t, name)
		if other, dup := seen[c.Spec.VolumeName]; dup {
			t.Fatalf("double bind: %s and %s both on %s", other, name, c.Spec.VolumeName)
		}
		seen[c.Spec.VolumeName] = name
		assertBound(t, api, name, c.Spec.VolumeName, true)
	}
	for i := range n {
		pv := api.pv(t, fmt.Sprintf("pv-%02d", i))
		if pv.Spec.ClaimRef != nil && seen[pv.Name] != pv.Spec.ClaimRef.Name {
			t.Errorf("%s claimRef %s but that claim is on another PV", pv.Name, pv.Spec.ClaimRef.Name)
		}
	}
	_, conflicts := api.counts()
	t.Logf("conflicts between the two binders: %d", conflicts)
}

func allBound(api *apiServer, n int) bool {
	for i := range n {
		o, err := api.Tracker().Get(pvcResource, testNS, fmt.Sprintf("c-%02d", i))
		if err != nil || o.(*v1.PersistentVolumeClaim).Status.Phase != v1.ClaimBound {
			return false
		}
	}
	return true
}

func TestWorkersOfOneProcessDoNotConflict(t *testing.T) {
	const n = 30
	var objs []runtime.Object
	for i := range n {
		objs = append(objs, makePV(fmt.Sprintf("pv-%02d", i), "1Gi"), makeClaim(fmt.Sprintf("c-%02d", i), "1Gi"))
	}
	api := newAPIServer(objs...)
	f := newFixture(t, api)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := w; i < n; i += 6 {
				if err := f.syncClaim(fmt.Sprintf("c-%02d", i)); err != nil {
					t.Errorf("c-%02d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	if !allBound(api, n) {
		t.Fatal("not all bound in one pass")
	}
	if w, c := api.counts(); w != 4*n || c != 0 {
		t.Errorf("writes %d conflicts %d, want %d and 0", w, c, 4*n)
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

// The reconcile metrics carry upstream's name of the controller, the value --controllers takes.
func TestReconcileMetricsCarryUpstreamName(t *testing.T) {
	f := newFixture(t, newAPIServer())
	if got := metricstest.LabelValues(t, f.registry, "kcm_split_reconcile_total", "controller"); got != Name {
		t.Fatalf("controller label %q, want %q", got, Name)
	}
}
