package pvbinder

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// TestHalfBoundPVReleasedWhenClaimDeleted: crash after the PV's claimRef, then the claim is
// deleted. The PV must not stay reserved: Released, then its policy.
func TestHalfBoundPVReleasedWhenClaimDeleted(t *testing.T) {
	api := newAPIServer(makePV("a", "1Gi"), makeClaim("c", "1Gi"))
	api.failAfter = 1
	first := newFixture(t, api)
	_ = first.syncClaim("c")
	api.failAfter = -1
	if err := api.CoreV1().PersistentVolumeClaims(testNS).Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, api)
	f.settle()
	if pv := api.pv(t, "a"); pv.Status.Phase != v1.VolumeReleased {
		t.Errorf("phase %s, want Released", pv.Status.Phase)
	}
}

// TestUnbindReservationOfClaimBoundElsewhere: two binders raced and left a claimRef on a PV
// whose claim is bound to another PV; the volume sync frees it.
func TestUnbindReservationOfClaimBoundElsewhere(t *testing.T) {
	claim := makeClaim("c", "1Gi", claimVolume("a"), claimAnn(storagehelpers.AnnBindCompleted, "yes"), claimAnn(storagehelpers.AnnBoundByController, "yes"), claimPhase(v1.ClaimBound))
	api := newAPIServer(
		makePV("a", "1Gi", pvRef("c", claim.UID), pvPhase(v1.VolumeBound), pvAnn(storagehelpers.AnnBoundByController, "yes")),
		makePV("b", "1Gi", pvRef("c", claim.UID), pvPhase(v1.VolumeBound), pvAnn(storagehelpers.AnnBoundByController, "yes")),
		claim)
	f := newFixture(t, api)
	f.settle()
	if pv := api.pv(t, "b"); pv.Spec.ClaimRef != nil || pv.Status.Phase != v1.VolumeAvailable || metav1.HasAnnotation(pv.ObjectMeta, storagehelpers.AnnBoundByController) {
		t.Errorf("b not freed: %+v %s %v", pv.Spec.ClaimRef, pv.Status.Phase, pv.Annotations)
	}
	if c := api.claim(t, "c"); c.Spec.VolumeName != "a" || c.Status.Phase != v1.ClaimBound {
		t.Errorf("claim moved: %s %s", c.Spec.VolumeName, c.Status.Phase)
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

func TestReclaim(t *testing.T) {
	bound := func(name string, opts ...pvOpt) *v1.PersistentVolume {
		return makePV(name, "1Gi", append([]pvOpt{pvRef("gone-"+name, "uid-gone"), pvPhase(v1.VolumeBound), pvAnn(storagehelpers.AnnBoundByController, "yes")}, opts...)...)
	}
	csi := func(pv *v1.PersistentVolume) {
		pv.Spec.PersistentVolumeSource = v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d.example.com", VolumeHandle: "h"}}
	}
	tests := []struct {
		name      string
		pv        *v1.PersistentVolume
		wantPhase v1.PersistentVolumePhase
		wantEvent string
	}{
		{"retain", bound("r"), v1.VolumeReleased, ""},
		{"delete by external provisioner", bound("e", pvPolicy(v1.PersistentVolumeReclaimDelete), pvAnn(storagehelpers.AnnDynamicallyProvisioned, "example.com/p")), v1.VolumeReleased, ""},
		{"delete by CSI driver", bound("c", pvPolicy(v1.PersistentVolumeReclaimDelete), csi), v1.VolumeReleased, ""},
		{"delete with nothing to do it", bound("n", pvPolicy(v1.PersistentVolumeReclaimDelete)), v1.VolumeFailed, "Warning VolumeFailedDelete"},
		// An in-tree plugin that is neither in this binary nor migrated to CSI.
		{"delete by an in-tree plugin", bound("i", pvPolicy(v1.PersistentVolumeReclaimDelete), pvAnn(storagehelpers.AnnDynamicallyProvisioned, "kubernetes.io/rbd")), v1.VolumeFailed, "Warning VolumeFailedDelete no deletable volume plugin matched name: kubernetes.io/rbd"},
		// Migrated to CSI: marked for the driver's provisioner, which deletes it.
		{"delete by an in-tree plugin migrated to CSI", bound("m", pvPolicy(v1.PersistentVolumeReclaimDelete), pvAnn(storagehelpers.AnnDynamicallyProvisioned, "kubernetes.io/gce-pd")), v1.VolumeReleased, ""},
		// Its recycler Pod runs (recycle_test.go follows it to the end).
		{"recycle", bound("y", pvPolicy(v1.PersistentVolumeReclaimRecycle)), v1.VolumeReleased, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newAPIServer(tt.pv)
			f := newFixture(t, api)
			f.settle()
			pv := api.pv(t, tt.pv.Name)
			if pv.Status.Phase != tt.wantPhase {
				t.Errorf("phase %s, want %s", pv.Status.Phase, tt.wantPhase)
			}
			if pv.Spec.ClaimRef == nil {
				t.Error("claimRef dropped: Released PVs keep it")
			}
			if want, ok := upstreamMigrated[tt.pv.Annotations[storagehelpers.AnnDynamicallyProvisioned]]; ok && pv.Annotations[storagehelpers.AnnMigratedTo] != want {
				t.Errorf("migrated-to %q, want %q", pv.Annotations[storagehelpers.AnnMigratedTo], want)
			}
			ev := strings.Join(f.events(), "\n")
			if (tt.wantEvent == "") != (ev == "") || !strings.Contains(ev, tt.wantEvent) {
				t.Errorf("events %q, want %q", ev, tt.wantEvent)
			}
			// Settled: another pass changes nothing, and emits nothing.
			before, _ := api.counts()
			f.settle()
			if after, _ := api.counts(); after != before || len(f.events()) != 0 {
				t.Error("not settled")
			}
		})
	}
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

func TestProvisioningAndWaitForFirstConsumer(t *testing.T) {
	t.Run("external provisioner", func(t *testing.T) {
		api := newAPIServer(makeClass("ext", "example.com/p", storagev1.VolumeBindingImmediate, false), makeClaim("c", "1Gi", claimClassOpt("ext")))
		f := newFixture(t, api)
		f.settle()
		c := api.claim(t, "c")
		if c.Annotations[storagehelpers.AnnStorageProvisioner] != "example.com/p" || c.Annotations[storagehelpers.AnnBetaStorageProvisioner] != "example.com/p" {
			t.Errorf("annotations %v", c.Annotations)
		}
		if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Normal ExternalProvisioning Waiting for a volume to be created either by the external provisioner 'example.com/p'") {
			t.Errorf("events %q", ev)
		}
		// The provisioner creates a PV pre-bound to the claim.
		pv := makePV("pvc-1", "1Gi", pvClass("ext"), pvRef("c", c.UID), pvPhase(v1.VolumePending), pvAnn(storagehelpers.AnnDynamicallyProvisioned, "example.com/p"))
		if _, err := api.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.settle()
		assertBound(t, api, "c", "pvc-1", false)
	})
	t.Run("in-tree provisioner", func(t *testing.T) {
		api := newAPIServer(makeClass("old", "kubernetes.io/no-provisioner", storagev1.VolumeBindingImmediate, false), makeClaim("c", "1Gi", claimClassOpt("old")))
		f := newFixture(t, api)
		f.settle()
		if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Warning ProvisioningFailed") {
			t.Errorf("events %q", ev)
		}
	})
	t.Run("wait for first consumer", func(t *testing.T) {
		api := newAPIServer(makeClass("wffc", "example.com/p", storagev1.VolumeBindingWaitForFirstConsumer, false),
			makeClaim("c", "1Gi", claimClassOpt("wffc")), makePV("a", "1Gi", pvClass("wffc")))
		f := newFixture(t, api)
		f.settle()
		c := api.claim(t, "c")
		if c.Spec.VolumeName != "" || c.Annotations[storagehelpers.AnnStorageProvisioner] != "" {
			t.Fatalf("did not wait: %+v", c)
		}
		if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Normal WaitForFirstConsumer waiting for first consumer to be created before binding") {
			t.Errorf("events %q", ev)
		}
		// The scheduler picks a node.
		c = c.DeepCopy()
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, storagehelpers.AnnSelectedNode, "node-1")
		if _, err := api.CoreV1().PersistentVolumeClaims(testNS).Update(context.Background(), c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.settle()
		if got := api.claim(t, "c").Annotations[storagehelpers.AnnStorageProvisioner]; got != "example.com/p" {
			t.Errorf("storage-provisioner %q after selected-node", got)
		}
		if pv := api.pv(t, "a"); pv.Spec.ClaimRef != nil {
			t.Error("the binder chose a PV for a WaitForFirstConsumer claim; that is the scheduler's job")
		}
	})
}

func TestDefaultClassAppliedRetroactively(t *testing.T) {
	api := newAPIServer(makeClaim("c", "1Gi", claimNoClass()), makeClaim("empty", "1Gi"))
	f := newFixture(t, api)
	f.settle()
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "FailedBinding no persistent volumes available for this claim and no storage class is set") {
		t.Errorf("events %q", ev)
	}
	if _, err := api.StorageV1().StorageClasses().Create(context.Background(), makeClass("std", "example.com/p", storagev1.VolumeBindingImmediate, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.settle()
	if c := api.claim(t, "c"); c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != "std" {
		t.Errorf("class %v, want std", c.Spec.StorageClassName)
	}
	if c := api.claim(t, "empty"); *c.Spec.StorageClassName != "" {
		t.Error("a claim that chose no class (\"\") got the default")
	}
	if got := testutil.ToFloat64(f.c.metrics.retroactive); got != 1 {
		t.Errorf("retroactive_storageclass_total %v", got)
	}
}

func TestVolumeModeMismatchOnPreBoundPV(t *testing.T) {
	api := newAPIServer(makePV("a", "1Gi", pvRef("c", ""), pvBlock()), makeClaim("c", "1Gi"))
	f := newFixture(t, api)
	f.settle()
	if pv := api.pv(t, "a"); pv.Status.Phase != v1.VolumeAvailable || api.claim(t, "c").Spec.VolumeName != "" {
		t.Error("bound despite mismatching volume modes")
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

func TestCountMetrics(t *testing.T) {
	api := newAPIServer(makePV("a", "1Gi"), makePV("b", "1Gi", pvClass("gold")), makeClaim("c", "1Gi"), makeClaim("d", "1Gi", claimClassOpt("gold"), claimSelector(map[string]string{"no": "match"})))
	f := newFixture(t, api)
	f.settle()
	want := `
# HELP pv_collector_bound_pv_count Gauge measuring number of persistent volume currently bound
# TYPE pv_collector_bound_pv_count gauge
pv_collector_bound_pv_count{storage_class=""} 1
# HELP pv_collector_bound_pvc_count Gauge measuring number of persistent volume claim currently bound
# TYPE pv_collector_bound_pvc_count gauge
pv_collector_bound_pvc_count{namespace="ns",storage_class="",volume_attributes_class=""} 1
# HELP pv_collector_total_pv_count Gauge measuring total number of persistent volumes
# TYPE pv_collector_total_pv_count gauge
pv_collector_total_pv_count{plugin_name="kubernetes.io/host-path",volume_mode="Filesystem"} 2
# HELP pv_collector_unbound_pv_count Gauge measuring number of persistent volume currently unbound
# TYPE pv_collector_unbound_pv_count gauge
pv_collector_unbound_pv_count{storage_class="gold"} 1
# HELP pv_collector_unbound_pvc_count Gauge measuring number of persistent volume claim currently unbound
# TYPE pv_collector_unbound_pvc_count gauge
pv_collector_unbound_pvc_count{namespace="ns",storage_class="gold",volume_attributes_class=""} 1
`
	if err := testutil.GatherAndCompare(f.registry, strings.NewReader(want),
		"pv_collector_bound_pv_count", "pv_collector_unbound_pv_count", "pv_collector_bound_pvc_count",
		"pv_collector_unbound_pvc_count", "pv_collector_total_pv_count"); err != nil {
		t.Error(err)
	}
}

// TestClaimWaitsSilentlyForArrivingPV: a PV that fits but is still Pending (the volume loop
// has not made it Available yet) keeps the claim waiting without an event or a provisioning
// request; once the PV is Available the claim binds it.
func TestClaimWaitsSilentlyForArrivingPV(t *testing.T) {
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
		t.Errorf("asked the provisioner for a volume although one was arriving: %q", a)
	}
}

// TestBindWakesTheNextWaitingClaim: claims that found no PV wait without retrying; each
// completed bind wakes the oldest, so PVs that turn up are used in claim order and no claim
// waits for the resync.
func TestBindWakesTheNextWaitingClaim(t *testing.T) {
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
	f.c.wakeFor(api.pv(t, "p1"))
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

// TestBindsDoNotWakeProvisioningClaims: a claim handed to its provisioner (or waiting for its
// first consumer) is brought back by the provisioner's PV or the scheduler, not by other
// claims' binds, which would only repeat its event; a claim of a class with no provisioner
// keeps waiting for a static PV.
func TestBindsDoNotWakeProvisioningClaims(t *testing.T) {
	api := newAPIServer(
		makeClass("ext", "example.com/p", storagev1.VolumeBindingImmediate, false),
		makeClass("wffc", "example.com/p", storagev1.VolumeBindingWaitForFirstConsumer, false),
		makeClaim("dyn", "1Gi", claimClassOpt("ext")),
		makeClaim("late", "1Gi", claimClassOpt("wffc")),
		makeClaim("manual", "1Gi", claimClassOpt("manual")))
	f := newFixture(t, api)
	for _, n := range []string{"dyn", "late", "manual"} {
		if err := f.syncClaim(n); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.c.waiting.takeOldest(nil); got != testNS+"/manual" {
		t.Errorf("waiting: %q, want only the claim of the class without a provisioner", got)
	}
	if got := f.c.waiting.takeOldest(nil); got != "" {
		t.Errorf("also waiting: %q", got)
	}
}
