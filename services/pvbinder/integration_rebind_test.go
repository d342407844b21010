package pvbinder_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/pvbinder"
)

// TestOversizedBindGetsAnEvent: with the default ratio, a claim that gets a volume ten times what it
// asks is told so, once; a claim whose volume fits is not.
func TestOversizedBindGetsAnEvent(t *testing.T) {
	c, ns, _ := withController(t)
	createPV(t, c, pv(ns+"-fit", ns, "1Gi"))
	createPV(t, c, pv(ns+"-big", ns, "10Gi"))
	waitPV(t, c, ns+"-fit", "Available", phase(corev1.VolumeAvailable))
	waitPV(t, c, ns+"-big", "Available", phase(corev1.VolumeAvailable))
	createClaim(t, c, claim(ns, "fit", ns, "1Gi"))
	waitClaim(t, c, ns, "fit", "Bound", boundTo(ns+"-fit"))
	createClaim(t, c, claim(ns, "big", ns, "1Gi"))
	waitClaim(t, c, ns, "big", "Bound", boundTo(ns+"-big"))
	waitEvent(t, c, ns, "big", pvbinder.ReasonOversizedVolumeBound)
	if ev := events(t, c, ns, "big"); !strings.Contains(ev, "10Gi") || strings.Count(ev, pvbinder.ReasonOversizedVolumeBound+":") != 1 {
		t.Errorf("events of big: %s; want one %s giving the volume's size", ev, pvbinder.ReasonOversizedVolumeBound)
	}
	// Events leave the binder in the order it records them: fit's would be listed by now.
	if ev := events(t, c, ns, "fit"); strings.Contains(ev, pvbinder.ReasonOversizedVolumeBound) {
		t.Errorf("the claim whose volume fits got %s", ev)
	}
}

// TestRecreatedClaimGetsItsVolumeBack: a claim deleted and created again under the same name gets its
// Released volume back when the volume opted in, with an Event naming both claim UIDs; a
// volume that did not opt in stays Released, its recreated claim Pending, as upstream. One
// claim worker: the queue is FIFO, so the plain claim's sync comes before the opted-in one's
// final bind, which the test waits for.
func TestRecreatedClaimGetsItsVolumeBack(t *testing.T) {
	c, ns, _ := withController(t, "--"+pvbinder.FlagRebindOnRecreate, "--"+pvbinder.FlagWorkers+"=1")
	ctx := context.Background()
	keep, plain := ns+"-keep", ns+"-plain"
	createPV(t, c, pv(keep, ns, "1Gi", func(p *corev1.PersistentVolume) {
		p.Annotations = map[string]string{pvbinder.AnnRebindOnRecreate: "true"}
	}))
	createPV(t, c, pv(plain, ns, "1Gi"))
	old := map[string]*corev1.PersistentVolumeClaim{}
	for name, volume := range map[string]string{"data": keep, "other": plain} {
		created := createClaim(t, c, claim(ns, name, ns, "1Gi", func(pvc *corev1.PersistentVolumeClaim) { pvc.Spec.VolumeName = volume }))
		waitClaim(t, c, ns, name, "Bound", boundTo(volume))
		old[name] = created
	}
	for name, volume := range map[string]string{"data": keep, "other": plain} {
		deleteClaim(t, c, ns, name)
		waitPV(t, c, volume, "Released", phase(corev1.VolumeReleased))
	}

	// Recreated, without naming the volume: the plain one first.
	createClaim(t, c, claim(ns, "other", ns, "1Gi"))
	recreated := createClaim(t, c, claim(ns, "data", ns, "1Gi"))
	waitClaim(t, c, ns, "data", "Bound", boundTo(keep))
	p := waitPV(t, c, keep, "Bound", phase(corev1.VolumeBound))
	if p.Spec.ClaimRef == nil || p.Spec.ClaimRef.UID != recreated.UID {
		t.Fatalf("volume %s: %s, want bound to the new claim %s", keep, describePV(p), recreated.UID)
	}
	waitEvent(t, c, ns, "data", pvbinder.ReasonVolumeRebound)
	waitEvent(t, c, "default", keep, pvbinder.ReasonVolumeRebound)
	for _, ev := range []string{events(t, c, ns, "data"), events(t, c, "default", keep)} {
		if !strings.Contains(ev, string(old["data"].UID)) || !strings.Contains(ev, string(recreated.UID)) {
			t.Errorf("event %s does not name the old (%s) and new (%s) claim UIDs", ev, old["data"].UID, recreated.UID)
		}
	}

	other, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "other", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Spec.VolumeName != "" || other.Status.Phase == corev1.ClaimBound {
		t.Errorf("claim other: volumeName %q phase %s, want Pending (its volume did not opt in)", other.Spec.VolumeName, other.Status.Phase)
	}
	pp, err := c.CoreV1().PersistentVolumes().Get(ctx, plain, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pp.Status.Phase != corev1.VolumeReleased || pp.Spec.ClaimRef == nil || pp.Spec.ClaimRef.UID != old["other"].UID {
		t.Errorf("volume %s: %s, want Released to the old claim", plain, describePV(pp))
	}
}
