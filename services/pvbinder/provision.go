package pvbinder

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
)

// assignDefaultClass gives a claim created without any class the default class, once one
// exists. True means the claim was updated (its update event brings it back).
func (c *Controller) assignDefaultClass(ctx context.Context, key string, claim *v1.PersistentVolumeClaim) (bool, error) {
	if storagehelpers.PersistentVolumeClaimHasClass(claim) {
		return false, nil
	}
	classes, err := c.classLister.List(labels.Everything())
	if err != nil {
		return false, err
	}
	def := defaultClass(classes)
	if def == nil {
		return false, nil
	}
	updated := claim.DeepCopy()
	updated.Spec.StorageClassName = &def.Name
	written, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		c.metrics.retroactiveErrors.Inc()
		return false, fmt.Errorf("assigning default class %s to claim %s: %w", def.Name, key, err)
	}
	c.metrics.retroactive.Inc()
	c.claims.Wrote(key, updated.ResourceVersion, written)
	klog.FromContext(ctx).V(2).Info("Assigned the default StorageClass", "storageClass", def.Name)
	return true, nil
}

// provision hands a claim to its class's provisioner, as upstream: it annotates the claim
// with the provisioner's name; an external provisioner (the CSI driver, for an in-tree plugin
// migrated to CSI) then creates a PV pre-bound to it, which the claim binds, while the
// kubernetes.io/host-path plugin is run here. Any other in-tree provisioner name fails with
// an event, as upstream does for a plugin it lacks. With dynamic provisioning off, nothing
// happens: the claim waits for a PV.
func (c *Controller) provision(ctx context.Context, key string, claim *v1.PersistentVolumeClaim, className string) error {
	if !c.opts.DynamicProvisioning {
		return nil
	}
	class, err := c.classLister.Get(className)
	if apierrors.IsNotFound(err) {
		c.recorder.Event(claim, v1.EventTypeWarning, ReasonProvisioningFailed,
			fmt.Sprintf("storageclass.storage.k8s.io %q not found", className))
		return nil
	}
	if err != nil {
		return err
	}
	provisioner := c.migration.provisionerName(class.Provisioner)
	inTree := provisioner == hostPathPluginName
	if !inTree && strings.HasPrefix(provisioner, inTreeProvisionerNamePrefix) {
		c.recorder.Event(claim, v1.EventTypeWarning, ReasonProvisioningFailed,
			fmt.Sprintf("no volume plugin matched name: %s", class.Provisioner))
		return nil
	}
	// The clock of the end to end provision starts at the first attempt and stops when the
	// claim is bound.
	c.ops.start(key, provisioner, opProvision)
	if claim.Annotations[storagehelpers.AnnStorageProvisioner] != provisioner || claim.Annotations[storagehelpers.AnnBetaStorageProvisioner] != provisioner {
		updated := claim.DeepCopy()
		metav1.SetMetaDataAnnotation(&updated.ObjectMeta, storagehelpers.AnnStorageProvisioner, provisioner)
		metav1.SetMetaDataAnnotation(&updated.ObjectMeta, storagehelpers.AnnBetaStorageProvisioner, provisioner)
		// The claim now names the provisioner itself: a migrated-to left from an in-tree
		// name goes with it.
		c.migration.setMigratedTo(updated.Annotations, provisioner)
		written, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Update(ctx, updated, metav1.UpdateOptions{})
		if err != nil {
			if !inTree {
				c.recorder.Event(claim, v1.EventTypeWarning, ReasonProvisioningFailed, fmt.Sprintf("Error saving claim: %v", err))
			}
			c.ops.end(key, err)
			return fmt.Errorf("annotating claim %s for provisioner %s: %w", key, provisioner, err)
		}
		c.claims.Wrote(key, updated.ResourceVersion, written)
		claim = written
	}
	if inTree {
		// A claim whose provisioning failed stays in the waiting list: an admin's static
		// PV of its class is what it waits for then.
		return c.provisionHostPath(ctx, claim, class)
	}
	// The provisioner's PV names the claim, which brings it back; bind wake-ups would only
	// repeat the event below. (A claim of a class without a usable provisioner stays in the
	// waiting list: an admin's static PV of that class is what it waits for.)
	c.waiting.remove(key)
	c.recorder.Event(claim, v1.EventTypeNormal, ReasonExternalProvisioning, fmt.Sprintf(
		"Waiting for a volume to be created either by the external provisioner '%s' or manually by the system administrator. "+
			"If volume creation is delayed, please verify that the provisioner is running and correctly registered.", provisioner))
	return nil
}
