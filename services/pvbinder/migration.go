package pvbinder

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	csitrans "k8s.io/csi-translation-lib"
	"k8s.io/klog/v2"
)

// csiMigration says which in-tree volume plugins are migrated to CSI, and to which driver.
//
// In kube-controller-manager v1.36 the migration of every plugin csi-translation-lib
// translates (aws-ebs, gce-pd, azure-disk, azure-file, cinder, vsphere-volume,
// portworx-volume) is GA and locked on, and their in-tree code is gone: upstream's
// migration-enabled set is exactly the library's set of migratable plugins. So a claim of such
// a class is provisioned by the CSI driver's external provisioner, and a PV such a plugin
// provisioned is deleted by it (the PV is marked pv.kubernetes.io/migrated-to), never by
// this controller.
type csiMigration struct {
	translator csitrans.CSITranslator
}

func newCSIMigration() csiMigration { return csiMigration{translator: csitrans.New()} }

// driverFor returns the CSI driver that in-tree plugin is migrated to, and false when the
// plugin is not migrated (an external provisioner, or an in-tree plugin with no CSI driver).
func (m csiMigration) driverFor(plugin string) (string, bool) {
	if !m.translator.IsMigratableIntreePluginByName(plugin) {
		return "", false
	}
	driver, err := m.translator.GetCSINameFromInTreeName(plugin)
	if err != nil || driver == "" {
		return "", false
	}
	return driver, true
}

// provisionerName is the provisioner a claim of a class with this provisioner is annotated
// for: the CSI driver for a migrated plugin, the class's own provisioner otherwise.
func (m csiMigration) provisionerName(classProvisioner string) string {
	if driver, ok := m.driverFor(classProvisioner); ok {
		return driver
	}
	return classProvisioner
}

// setMigratedTo brings the migrated-to annotation in ann in line with the migration of
// provisioner: the plugin's CSI driver when it is migrated, absent otherwise (a PV or claim
// of a provisioner that is not, or no longer, migrated is handled without CSI). It changes
// ann in place and reports whether it did.
func (m csiMigration) setMigratedTo(ann map[string]string, provisioner string) bool {
	driver, migrated := m.driverFor(provisioner)
	current, has := ann[storagehelpers.AnnMigratedTo]
	switch {
	case migrated && current != driver:
		ann[storagehelpers.AnnMigratedTo] = driver
		return true
	case !migrated && has:
		delete(ann, storagehelpers.AnnMigratedTo)
		return true
	}
	return false
}

// claimProvisioner is the provisioner a claim was annotated for (the GA key, else the beta
// one); false when neither is set, and then nothing is known about its migration.
func claimProvisioner(claim *v1.PersistentVolumeClaim) (string, bool) {
	if p, ok := claim.Annotations[storagehelpers.AnnStorageProvisioner]; ok {
		return p, true
	}
	p, ok := claim.Annotations[storagehelpers.AnnBetaStorageProvisioner]
	return p, ok
}

// migratedClaim returns a copy of claim whose migrated-to annotation follows its
// provisioner's migration, or nil when it already does.
func (m csiMigration) migratedClaim(claim *v1.PersistentVolumeClaim) *v1.PersistentVolumeClaim {
	provisioner, ok := claimProvisioner(claim)
	if !ok {
		return nil
	}
	updated := claim.DeepCopy()
	if !m.setMigratedTo(updated.Annotations, provisioner) {
		return nil
	}
	return updated
}

// migratedVolume returns a copy of pv whose migrated-to annotation follows the migration of
// the plugin that provisioned it, without the in-tree deletion finalizer when that plugin is
// migrated (its CSI driver deletes the volume and keeps its own finalizer), or nil when
// nothing changes. A PV nothing provisioned (no provisioned-by) is left as it is, as upstream:
// no external provisioner deletes a volume it did not make.
func (m csiMigration) migratedVolume(pv *v1.PersistentVolume) *v1.PersistentVolume {
	provisioner, ok := pv.Annotations[storagehelpers.AnnDynamicallyProvisioned]
	if !ok {
		return nil
	}
	updated := pv.DeepCopy()
	changed := m.setMigratedTo(updated.Annotations, provisioner)
	if _, migrated := m.driverFor(provisioner); migrated && slices.Contains(updated.Finalizers, storagehelpers.PVDeletionInTreeProtectionFinalizer) {
		updated.Finalizers = slices.DeleteFunc(updated.Finalizers, func(f string) bool {
			return f == storagehelpers.PVDeletionInTreeProtectionFinalizer
		})
		if len(updated.Finalizers) == 0 {
			updated.Finalizers = nil
		}
		changed = true
	}
	if !changed {
		return nil
	}
	return updated
}

// annotateClaimMigration writes the claim's migrated-to annotation when it is not in line
// with its provisioner's migration, and returns the claim as it now is.
func (c *Controller) annotateClaimMigration(ctx context.Context, key string, claim *v1.PersistentVolumeClaim) (*v1.PersistentVolumeClaim, error) {
	updated := c.migration.migratedClaim(claim)
	if updated == nil {
		return claim, nil
	}
	written, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("updating the CSI migration annotation of claim %s: %w", key, err)
	}
	c.claims.Wrote(key, updated.ResourceVersion, written)
	klog.FromContext(ctx).V(4).Info("CSI migration annotation updated", "migratedTo", written.Annotations[storagehelpers.AnnMigratedTo])
	return written, nil
}

// annotateVolumeMigration writes the PV's migrated-to annotation and in-tree finalizer when
// they are not in line with its provisioner's migration, and returns the PV as it now is.
// Called with the PV's lock held.
func (c *Controller) annotateVolumeMigration(ctx context.Context, pv *v1.PersistentVolume) (*v1.PersistentVolume, error) {
	updated := c.migration.migratedVolume(pv)
	if updated == nil {
		return pv, nil
	}
	written, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("updating the CSI migration annotation of volume %s: %w", pv.Name, err)
	}
	c.volumes.Wrote(pv.Name, updated.ResourceVersion, written)
	klog.FromContext(ctx).V(4).Info("CSI migration annotation updated", "migratedTo", written.Annotations[storagehelpers.AnnMigratedTo])
	return written, nil
}
