package pvbinder

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
)

func (c *Controller) syncVolumeKey(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("pv", name)
	ctx = klog.NewContext(ctx, logger)
	start := time.Now()
	defer func() { logger.V(4).Info("Finished syncing volume", "duration", time.Since(start)) }()

	c.pvLocks.LockKey(name)
	defer c.pvLocks.UnlockKey(name)
	pv, err := c.volume(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.syncVolume(ctx, pv)
}

// syncVolume brings a PV's phase in line with its claim, releases it when the claim is gone
// and undoes a reservation its claim did not complete. Called with the PV's lock held.
func (c *Controller) syncVolume(ctx context.Context, pv *v1.PersistentVolume) error {
	logger := klog.FromContext(ctx)
	pv, err := c.annotateVolumeMigration(ctx, pv)
	if err != nil {
		return err
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		// Unclaimed, or pre-bound by a user to a claim that may not exist yet.
		updated, err := c.setVolumePhase(ctx, pv, v1.VolumeAvailable, "")
		if err != nil {
			return err
		}
		if ref == nil {
			c.queueWaitingClaimFor(updated)
		} else {
			c.claimQueue.Add(refKey(ref))
		}
		return nil
	}

	claim, err := c.claimOf(ctx, pv)
	if err != nil {
		return err
	}
	switch {
	case claim == nil:
		// The claim is gone: Released, then the reclaim policy.
		if pv.Status.Phase != v1.VolumeReleased && pv.Status.Phase != v1.VolumeFailed {
			if pv, err = c.setVolumePhase(ctx, pv, v1.VolumeReleased, ""); err != nil {
				return err
			}
		}
		return c.reclaim(ctx, pv)
	case claim.Spec.VolumeName == "":
		// The claim's half of a bind is still to come (or was interrupted): the claim
		// finishes it. Its volume mode cannot change, so a mismatch can never bind.
		if storagehelpers.CheckVolumeModeMismatches(&claim.Spec, &pv.Spec) {
			c.recorder.Event(pv, v1.EventTypeWarning, ReasonVolumeMismatch, fmt.Sprintf(
				"Cannot bind PersistentVolume to requested PersistentVolumeClaim %q due to incompatible volumeMode.", claim.Name))
			c.recorder.Event(claim, v1.EventTypeWarning, ReasonVolumeMismatch, fmt.Sprintf(
				"Cannot bind PersistentVolume %q to requested PersistentVolumeClaim due to incompatible volumeMode.", pv.Name))
			return nil
		}
		c.claimQueue.Add(refKey(ref))
		return nil
	case claim.Spec.VolumeName == pv.Name:
		_, err := c.setVolumePhase(ctx, pv, v1.VolumeBound, "")
		return err
	default:
		// The claim is bound to another volume: this PV was reserved by a bind that
		// ended elsewhere (an interrupted bind, two binders racing), or its claim was
		// re-pointed. A dynamically provisioned PV with Delete goes back to its
		// provisioner; any other is made Available again.
		if metav1.HasAnnotation(pv.ObjectMeta, storagehelpers.AnnDynamicallyProvisioned) && pv.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimDelete {
			if pv.Status.Phase != v1.VolumeReleased && pv.Status.Phase != v1.VolumeFailed {
				if pv, err = c.setVolumePhase(ctx, pv, v1.VolumeReleased, ""); err != nil {
					return err
				}
			}
			return c.reclaim(ctx, pv)
		}
		logger.V(2).Info("Volume is claimed by a claim bound to another volume; unbinding", "claim", refKey(ref), "claimVolume", claim.Spec.VolumeName)
		return c.unbind(ctx, pv)
	}
}

// claimOf returns the claim a PV's claimRef names, or nil when it no longer exists (a claim
// of the same name with another UID is another claim). Before declaring a claim gone, which
// releases the PV, it asks the API server: the cache may not have the claim yet.
func (c *Controller) claimOf(ctx context.Context, pv *v1.PersistentVolume) (*v1.PersistentVolumeClaim, error) {
	ref := pv.Spec.ClaimRef
	claim, err := c.claim(refKey(ref))
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if err == nil && claim.UID == ref.UID {
		return claim, nil
	}
	if err != nil && (pv.Status.Phase == v1.VolumeReleased || pv.Status.Phase == v1.VolumeFailed) {
		return nil, nil // released already; nothing to confirm
	}
	live, err := c.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if live.UID != ref.UID {
		return nil, nil
	}
	return live, nil
}

// setVolumePhase writes the PV's phase (and message) if it differs. The API server records
// lastPhaseTransitionTime.
func (c *Controller) setVolumePhase(ctx context.Context, pv *v1.PersistentVolume, phase v1.PersistentVolumePhase, message string) (*v1.PersistentVolume, error) {
	if pv.Status.Phase == phase {
		return pv, nil
	}
	updated := pv.DeepCopy()
	updated.Status.Phase = phase
	updated.Status.Message = message
	written, err := c.client.CoreV1().PersistentVolumes().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("setting phase of volume %s to %s: %w", pv.Name, phase, err)
	}
	c.volumes.Wrote(pv.Name, updated.ResourceVersion, written)
	klog.FromContext(ctx).V(4).Info("Volume phase changed", "phase", phase)
	return written, nil
}

// failVolume marks the PV Failed with an event, once.
func (c *Controller) failVolume(ctx context.Context, pv *v1.PersistentVolume, reason, message string) error {
	if pv.Status.Phase == v1.VolumeFailed {
		return nil
	}
	updated, err := c.setVolumePhase(ctx, pv, v1.VolumeFailed, message)
	if err != nil {
		return err
	}
	c.recorder.Event(updated, v1.EventTypeWarning, reason, message)
	return nil
}

// reclaim applies a Released PV's reclaim policy. Recycle runs a recycler Pod (recycle.go).
// Of upstream's in-tree deleters this binary has the host-path one; the storage of any other
// PV is deleted by the external (CSI)
// provisioner that made it, which watches for Released PVs with Delete, and the PV object
// with it. A PV nothing can delete is marked Failed with an event, so an admin notices.
func (c *Controller) reclaim(ctx context.Context, pv *v1.PersistentVolume) error {
	logger := klog.FromContext(ctx)
	if pv.Annotations[storagehelpers.AnnMigratedTo] != "" {
		return nil // a CSI driver reclaims it
	}
	switch pv.Spec.PersistentVolumeReclaimPolicy {
	case v1.PersistentVolumeReclaimRetain:
		logger.V(4).Info("Volume is released; policy Retain keeps it for an admin")
		return nil
	case v1.PersistentVolumeReclaimDelete:
		// The clock of the end to end delete runs until the PV is gone, whoever deletes it.
		c.ops.start(pv.Name, c.deleterName(pv), opDelete)
		provisioner := pv.Annotations[storagehelpers.AnnDynamicallyProvisioned]
		switch {
		case provisioner == hostPathPluginName || (provisioner == "" && pv.Spec.HostPath != nil):
			return c.deleteHostPath(ctx, pv)
		case provisioner != "" && !strings.HasPrefix(provisioner, inTreeProvisionerNamePrefix):
			logger.V(4).Info("Volume is released; waiting for its external provisioner to delete it", "provisioner", provisioner)
			return nil
		case provisioner == "" && pv.Spec.CSI != nil:
			logger.V(4).Info("Volume is released; waiting for its CSI driver to delete it", "driver", pv.Spec.CSI.Driver)
			return nil
		case provisioner != "":
			return c.failVolume(ctx, pv, ReasonVolumeFailedDelete, fmt.Sprintf("no deletable volume plugin matched name: %s", provisioner))
		default:
			return c.failVolume(ctx, pv, ReasonVolumeFailedDelete, fmt.Sprintf(
				"error getting deleter volume plugin for volume %q: no deletable volume plugin matched", pv.Name))
		}
	case v1.PersistentVolumeReclaimRecycle:
		return c.recycle(ctx, pv)
	default:
		return c.failVolume(ctx, pv, ReasonVolumeUnknownReclaim, "Volume has unrecognized PersistentVolumeReclaimPolicy")
	}
}

// deleterName labels a PV's delete operation as upstream: the in-tree plugin that deletes
// it, else the provisioner of its class (the CSI driver of a migrated plugin), else N/A.
func (c *Controller) deleterName(pv *v1.PersistentVolume) string {
	provisioner := pv.Annotations[storagehelpers.AnnDynamicallyProvisioned]
	switch {
	case provisioner == hostPathPluginName || (provisioner == "" && pv.Spec.HostPath != nil):
		return hostPathPluginName
	case provisioner != "" && strings.HasPrefix(provisioner, inTreeProvisionerNamePrefix):
		return pluginUnknown
	case provisioner == "" && pv.Spec.CSI == nil:
		return pluginUnknown
	}
	// An external provisioner or a CSI driver: the class's provisioner names it, which
	// keeps the label's values few whatever names provisioners write on their PVs.
	class, err := c.classLister.Get(storagehelpers.GetPersistentVolumeClass(pv))
	if err != nil {
		return pluginUnknown
	}
	return c.migration.provisionerName(class.Provisioner)
}

// unbind undoes a PV's claimRef: all of it if this binder set it, only the UID if a user
// pre-bound the PV (the user's choice of claim stands), then makes the PV Available.
func (c *Controller) unbind(ctx context.Context, pv *v1.PersistentVolume) error {
	updated := pv.DeepCopy()
	if metav1.HasAnnotation(pv.ObjectMeta, storagehelpers.AnnBoundByController) {
		updated.Spec.ClaimRef = nil
		delete(updated.Annotations, storagehelpers.AnnBoundByController)
		if len(updated.Annotations) == 0 {
			updated.Annotations = nil
		}
	} else {
		updated.Spec.ClaimRef.UID = ""
	}
	written, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("unbinding volume %s: %w", pv.Name, err)
	}
	c.volumes.Wrote(pv.Name, updated.ResourceVersion, written)
	written, err = c.setVolumePhase(ctx, written, v1.VolumeAvailable, "")
	if err != nil {
		return err
	}
	c.queueWaitingClaimFor(written)
	return nil
}
