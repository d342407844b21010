package pvbinder

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

// assertBound checks every field a completed bind of claim to pv writes.
func assertBound(t *testing.T, api *apiServer, claimName, pvName string, byController bool) {
	t.Helper()
	pv, claim := api.pv(t, pvName), api.claim(t, claimName)
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != claimName || pv.Spec.ClaimRef.UID != claim.UID {
		t.Errorf("pv %s claimRef = %+v, want %s/%s", pvName, pv.Spec.ClaimRef, claimName, claim.UID)
	}
	if ref := pv.Spec.ClaimRef; ref != nil && (ref.Kind != "PersistentVolumeClaim" || ref.APIVersion != "v1" || ref.Namespace != claim.Namespace) {
		t.Errorf("pv %s claimRef = %+v, want a v1 PersistentVolumeClaim in %s", pvName, ref, claim.Namespace)
	}
	if pv.Status.Phase != v1.VolumeBound {
		t.Errorf("pv %s phase %s, want Bound", pvName, pv.Status.Phase)
	}
	if got := metav1.HasAnnotation(pv.ObjectMeta, storagehelpers.AnnBoundByController); got != byController {
		t.Errorf("pv %s bound-by-controller = %v, want %v", pvName, got, byController)
	}
	if claim.Spec.VolumeName != pvName {
		t.Errorf("claim %s volumeName %q, want %q", claimName, claim.Spec.VolumeName, pvName)
	}
	if claim.Annotations[storagehelpers.AnnBindCompleted] != "yes" {
		t.Errorf("claim %s lacks %s", claimName, storagehelpers.AnnBindCompleted)
	}
	if claim.Status.Phase != v1.ClaimBound {
		t.Errorf("claim %s phase %s, want Bound", claimName, claim.Status.Phase)
	}
	want := pv.Spec.Capacity[v1.ResourceStorage]
	if got := claim.Status.Capacity[v1.ResourceStorage]; got.Cmp(want) != 0 {
		t.Errorf("claim %s capacity %s, want %s", claimName, got.String(), want.String())
	}
	if !slices.Equal(claim.Status.AccessModes, pv.Spec.AccessModes) {
		t.Errorf("claim %s access modes %v, want %v", claimName, claim.Status.AccessModes, pv.Spec.AccessModes)
	}
}

func TestBindStatic(t *testing.T) {
	api := newAPIServer(makePV("big", "10Gi"), makePV("fit", "2Gi"), makePV("small", "1Gi"), makeClaim("data", "2Gi"))
	f := newFixture(t, api)
	if err := f.syncClaim("data"); err != nil {
		t.Fatal(err)
	}
	assertBound(t, api, "data", "fit", true)
	if !metav1.HasAnnotation(api.claim(t, "data").ObjectMeta, storagehelpers.AnnBoundByController) {
		t.Error("claim lacks bound-by-controller")
	}
	// Four writes: PV claimRef, PV phase, claim volumeName, claim status. One sync does them all.
	if w, c := api.counts(); w != 4 || c != 0 {
		t.Errorf("writes %d conflicts %d, want 4 and 0", w, c)
	}
	for _, n := range []string{"big", "small"} {
		if pv := api.pv(t, n); pv.Spec.ClaimRef != nil {
			t.Errorf("%s claimed", n)
		}
	}
}

// TestBindCrashAfterEachWrite stops the binder after each write of a bind (every later
// write fails) and lets a new process, with fresh caches, take over: it must complete the
// same bind, never bind the claim to the other, equally good PV.
func TestBindCrashAfterEachWrite(t *testing.T) {
	for n := 0; n <= 4; n++ {
		t.Run(fmt.Sprintf("after write %d", n), func(t *testing.T) {
			api := newAPIServer(makePV("a", "1Gi"), makePV("b", "1Gi"), makeClaim("c", "1Gi"))
			api.failAfter = n
			first := newFixture(t, api)
			err := first.syncClaim("c")
			if (err == nil) != (n >= 4) {
				t.Fatalf("first sync: %v", err)
			}
			api.mu.Lock()
			api.failAfter = -1
			api.mu.Unlock()

			second := newFixture(t, api)
			second.settle()
			assertBound(t, api, "c", "a", true)
			if pv := api.pv(t, "b"); pv.Spec.ClaimRef != nil || pv.Status.Phase != v1.VolumeAvailable {
				t.Errorf("b touched: claimRef %v phase %s", pv.Spec.ClaimRef, pv.Status.Phase)
			}
			if w, _ := api.counts(); w != 4 {
				t.Errorf("%d writes in all, want 4: nothing redone", w)
			}
		})
	}
}

func TestPreBound(t *testing.T) {
	t.Run("PV pre-bound by a user, by name", func(t *testing.T) {
		api := newAPIServer(makePV("small", "1Gi"), makePV("mine", "5Gi", pvRef("c", ""), pvPhase(v1.VolumePending)), makeClaim("c", "1Gi"))
		f := newFixture(t, api)
		f.settle()
		assertBound(t, api, "c", "mine", false)
		if pv := api.pv(t, "small"); pv.Spec.ClaimRef != nil {
			t.Error("small claimed")
		}
	})
	t.Run("claim names its volume", func(t *testing.T) {
		api := newAPIServer(makePV("small", "1Gi"), makePV("mine", "5Gi"), makeClaim("c", "1Gi", claimVolume("mine")))
		f := newFixture(t, api)
		f.settle()
		assertBound(t, api, "c", "mine", true)
		if metav1.HasAnnotation(api.claim(t, "c").ObjectMeta, storagehelpers.AnnBoundByController) {
			t.Error("a claim the user bound is marked bound-by-controller")
		}
	})
	t.Run("claim names a volume that does not fit", func(t *testing.T) {
		api := newAPIServer(makePV("mine", "1Gi"), makeClaim("c", "5Gi", claimVolume("mine")))
		f := newFixture(t, api)
		f.settle()
		if pv := api.pv(t, "mine"); pv.Spec.ClaimRef != nil {
			t.Error("bound a PV that is too small")
		}
		if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Warning VolumeMismatch Cannot bind to requested volume \"mine\": requested PV is too small") {
			t.Errorf("events: %s", ev)
		}
	})
	t.Run("claim names a volume bound to another claim", func(t *testing.T) {
		api := newAPIServer(makePV("mine", "1Gi", pvRef("other", "uid-other"), pvPhase(v1.VolumeBound)), makeClaim("c", "1Gi", claimVolume("mine")))
		f := newFixture(t, api)
		if err := f.syncClaim("c"); err != nil {
			t.Fatal(err)
		}
		if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "FailedBinding volume \"mine\" already bound to a different claim.") {
			t.Errorf("events: %s", ev)
		}
	})
}

func TestClaimLostAndMisbound(t *testing.T) {
	boundClaim := func(name, volume string) *v1.PersistentVolumeClaim {
		return makeClaim(name, "1Gi", claimVolume(volume), claimAnn(storagehelpers.AnnBindCompleted, "yes"), claimPhase(v1.ClaimBound))
	}
	t.Run("PV gone", func(t *testing.T) {
		api := newAPIServer(boundClaim("c", "vanished"))
		f := newFixture(t, api)
		f.settle()
		if c := api.claim(t, "c"); c.Status.Phase != v1.ClaimLost {
			t.Errorf("phase %s, want Lost", c.Status.Phase)
		}
		if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Warning ClaimLost Bound claim has lost its PersistentVolume. Data on the volume is lost!") {
			t.Errorf("events %q", ev)
		}
	})
	t.Run("PV bound to another claim", func(t *testing.T) {
		api := newAPIServer(boundClaim("c", "a"), boundClaim("d", "a"), makePV("a", "1Gi", pvRef("d", claimUID("d")), pvPhase(v1.VolumeBound)))
		f := newFixture(t, api)
		f.settle()
		if c := api.claim(t, "c"); c.Status.Phase != v1.ClaimLost {
			t.Errorf("phase %s, want Lost", c.Status.Phase)
		}
		if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Warning ClaimMisbound") {
			t.Errorf("events %q", ev)
		}
		if c := api.claim(t, "d"); c.Status.Phase != v1.ClaimBound {
			t.Errorf("the rightful claim is %s", c.Status.Phase)
		}
	})
}

func TestVolumeModeMismatchOnPreBoundPV(t *testing.T) {
	api := newAPIServer(makePV("a", "1Gi", pvRef("c", ""), pvBlock()), makeClaim("c", "1Gi"))
	f := newFixture(t, api)
	f.settle()
	if pv := api.pv(t, "a"); pv.Status.Phase != v1.VolumeAvailable || api.claim(t, "c").Spec.VolumeName != "" {
		t.Error("bound despite mismatching volume modes")
	}
}

// TestClaimWaitsSilentlyForAPVBecomingAvailable: a PV that fits but is still Pending (the volume loop
// has not made it Available yet) keeps the claim waiting without an event or a provisioning
// request; once the PV is Available the claim binds it.
func TestClaimWaitsSilentlyForAPVBecomingAvailable(t *testing.T) {
	api := newAPIServer(makeClass("ext", "example.com/p", storagev1.VolumeBindingImmediate, false),
		makePV("new", "1Gi", pvClass("ext"), pvPhase(v1.VolumePending)), makeClaim("c", "1Gi", claimClassOpt("ext")))
	f := newFixture(t, api)
	if err := f.syncClaim("c"); err != nil {
		t.Fatal(err)
	}
	if w, _ := api.counts(); w != 0 || len(f.events()) != 0 {
		t.Fatalf("writes %d events %v: want a silent wait", w, f.events())
	}
	if err := f.syncVolume("new"); err != nil {
		t.Fatal(err)
	}
	// The Available write woke the waiting claim.
	if f.c.claimQueue.Len() != 1 {
		t.Fatalf("claim queue has %d keys, want the woken claim", f.c.claimQueue.Len())
	}
	f.settle()
	assertBound(t, api, "c", "new", true)
	if a := api.claim(t, "c").Annotations[storagehelpers.AnnStorageProvisioner]; a != "" {
		t.Errorf("asked the provisioner for a volume although one was becomingAvailable: %q", a)
	}
}

// TestBindQueuesTheNextWaitingClaim: claims that found no PV wait without retrying; each
// completed bind wakes the oldest, so PVs that turn up are used in claim order and no claim
// waits for the resync.
func TestBindQueuesTheNextWaitingClaim(t *testing.T) {
	first := makeClaim("first", "1Gi")
	first.CreationTimestamp = metav1.Unix(100, 0)
	second := makeClaim("second", "1Gi")
	second.CreationTimestamp = metav1.Unix(200, 0)
	api := newAPIServer(first, second)
	f := newFixture(t, api)
	for _, n := range []string{"second", "first"} {
		if err := f.syncClaim(n); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.c.claimQueue.Len(); n != 0 {
		t.Fatalf("%d keys queued by claims with nothing to bind: a retry loop", n)
	}
	// Two PVs become Available at once (say, a resync after an admin created them).
	for _, n := range []string{"p1", "p2"} {
		if _, err := api.CoreV1().PersistentVolumes().Create(context.Background(), makePV(n, "1Gi"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.catchUp()
	f.c.queueWaitingClaimFor(api.pv(t, "p1"))
	if k, _ := f.c.claimQueue.Get(); k != testNS+"/first" {
		t.Fatalf("woke %s, want the oldest claim", k)
	} else {
		f.c.claimQueue.Done(k)
	}
	if err := f.syncClaim("first"); err != nil {
		t.Fatal(err)
	}
	if k, _ := f.c.claimQueue.Get(); k != testNS+"/second" {
		t.Fatalf("the bind woke %s, want the next waiting claim", k)
	} else {
		f.c.claimQueue.Done(k)
	}
	if err := f.syncClaim("second"); err != nil {
		t.Fatal(err)
	}
	assertBound(t, api, "first", "p1", true)
	assertBound(t, api, "second", "p2", true)
}
