package pvbinder

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

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
