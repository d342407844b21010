package pvbinder_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/kcm-split/kcm-split/services/pvbinder"
)

// TestCSIMigration: classes and volumes of in-tree plugins migrated to CSI are handed to the
// CSI driver (upstream v1.36); those of other in-tree plugins are not.
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestCSIMigration(t *testing.T) {
	c, ns, _ := withController(t)
	const (
		inTree = "kubernetes.io/aws-ebs"
		driver = "ebs.csi.aws.com"
	)
	createClass(t, c, ns, inTree, storagev1.VolumeBindingImmediate, false)
	createClass(t, c, ns+"-rbd", "kubernetes.io/rbd", storagev1.VolumeBindingImmediate, false)

	// A claim of the aws-ebs class is annotated for the CSI driver's provisioner.
	createClaim(t, c, claim(ns, "ebs", ns, "1Gi"))
	got := waitClaim(t, c, ns, "ebs", "annotated for the CSI driver", func(p *corev1.PersistentVolumeClaim) bool {
		return p.Annotations[storagehelpers.AnnStorageProvisioner] == driver && p.Annotations[storagehelpers.AnnBetaStorageProvisioner] == driver
	})
	waitEvent(t, c, ns, "ebs", pvbinder.ReasonExternalProvisioning)
	if ev := events(t, c, ns, "ebs"); strings.Contains(ev, pvbinder.ReasonProvisioningFailed) || !strings.Contains(ev, "external provisioner '"+driver+"'") {
		t.Errorf("events: %s", ev)
	}
	// A claim of a class of an in-tree plugin that is not migrated: ProvisioningFailed, no
	// provisioner annotation, as before.
	createClaim(t, c, claim(ns, "rbd", ns+"-rbd", "1Gi"))
	waitEvent(t, c, ns, "rbd", pvbinder.ReasonProvisioningFailed)

	// The external provisioner, migrating, creates the volume as the in-tree plugin would
	// have: an awsElasticBlockStore source, provisioned-by the in-tree name, Delete, pre-bound.
	// It also carries the in-tree deletion finalizer, as a PV the in-tree plugin made does.
	name := "pvc-" + string(got.UID)
	createPV(t, c, pv(name, ns, "1Gi", func(p *corev1.PersistentVolume) {
		p.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-0123456789abcdef0", FSType: "ext4"}}
		p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		p.Annotations = map[string]string{storagehelpers.AnnDynamicallyProvisioned: inTree}
		p.Finalizers = []string{storagehelpers.PVDeletionInTreeProtectionFinalizer, storagehelpers.PVDeletionProtectionFinalizer}
		p.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: "ebs", UID: got.UID}
	}))
	waitClaim(t, c, ns, "ebs", "bound to the provisioned PV", boundTo(name))
	p := waitPV(t, c, name, "marked migrated to "+driver, func(p *corev1.PersistentVolume) bool {
		return p != nil && p.Annotations[storagehelpers.AnnMigratedTo] == driver
	})
	if slices.Contains(p.Finalizers, storagehelpers.PVDeletionInTreeProtectionFinalizer) || !slices.Contains(p.Finalizers, storagehelpers.PVDeletionProtectionFinalizer) {
		t.Errorf("finalizers %v: want the in-tree one removed, the external provisioner's kept", p.Finalizers)
	}

	// A static PV of the same source (nothing provisioned it) with Delete, and a PV of an
	// in-tree plugin that is not migrated: no CSI driver takes them; both end Failed, as
	// upstream.
	createPV(t, c, pv(ns+"-static", ns, "2Gi", func(p *corev1.PersistentVolume) {
		p.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-static"}}
		p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
	}))
	createPV(t, c, pv(ns+"-rbd", ns, "3Gi", func(p *corev1.PersistentVolume) {
		p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		p.Annotations = map[string]string{storagehelpers.AnnDynamicallyProvisioned: "kubernetes.io/rbd"}
	}))
	waitPV(t, c, ns+"-static", "Available", phase(corev1.VolumeAvailable))
	waitPV(t, c, ns+"-rbd", "Available", phase(corev1.VolumeAvailable))
	createClaim(t, c, claim(ns, "static", ns, "2Gi"))
	createClaim(t, c, claim(ns, "rbd-pv", ns, "3Gi"))
	waitClaim(t, c, ns, "static", "Bound", boundTo(ns+"-static"))
	waitClaim(t, c, ns, "rbd-pv", "Bound", boundTo(ns+"-rbd"))

	// Claims deleted: the migrated PV is Released and waits for the CSI driver; the others
	// are Failed.
	for _, n := range []string{"ebs", "static", "rbd-pv"} {
		deleteClaim(t, c, ns, n)
	}
	waitPV(t, c, name, "Released", phase(corev1.VolumeReleased))
	waitPV(t, c, ns+"-static", "Failed", phase(corev1.VolumeFailed))
	waitPV(t, c, ns+"-rbd", "Failed", phase(corev1.VolumeFailed))
	waitEvent(t, c, "default", ns+"-rbd", pvbinder.ReasonVolumeFailedDelete)

	// Still Released, not Failed, once the binder has caught up: a sentinel claim bound after
	// the deletes shows it has seen them.
	createPV(t, c, pv(ns+"-sentinel", ns, "4Gi"))
	waitPV(t, c, ns+"-sentinel", "Available", phase(corev1.VolumeAvailable))
	createClaim(t, c, claim(ns, "sentinel", ns, "4Gi"))
	waitClaim(t, c, ns, "sentinel", "Bound", boundTo(ns+"-sentinel"))
	p, err := c.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.VolumeReleased || p.Annotations[storagehelpers.AnnMigratedTo] != driver {
		t.Errorf("migrated PV: %s", describePV(p))
	}
	if ev := events(t, c, "default", name); strings.Contains(ev, pvbinder.ReasonVolumeFailedDelete) {
		t.Errorf("migrated PV events: %s", ev)
	}
	for _, n := range []string{ns + "-static", ns + "-rbd"} {
		if p, _ := c.CoreV1().PersistentVolumes().Get(context.Background(), n, metav1.GetOptions{}); p.Annotations[storagehelpers.AnnMigratedTo] != "" {
			t.Errorf("%s marked migrated: %s", n, describePV(p))
		}
	}
	// The claim of the non-migrated class was left alone.
	rbd, err := c.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "rbd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{storagehelpers.AnnStorageProvisioner, storagehelpers.AnnBetaStorageProvisioner, storagehelpers.AnnMigratedTo} {
		if v, ok := rbd.Annotations[k]; ok {
			t.Errorf("claim of the rbd class annotated %s=%s", k, v)
		}
	}
}
