package pvbinder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// No library serves this: upstream's host-path plugin is in k8s.io/kubernetes itself.
//
// The kubernetes.io/host-path provisioner and deleter, for development and testing on one
// node: a volume is a directory /tmp/hostpath_pv/<uuid> of this process's own filesystem.
// That is the node's only when the binary runs on the node itself (deploy/local) or in a
// Pod that mounts the node's /tmp/hostpath_pv at the same path; in a Pod without such a
// mount it is the container's, which no other Pod sees. Upstream has the same limit (its
// directory is on whichever host kube-controller-manager runs).
const (
	hostPathPluginName = "kubernetes.io/host-path"
	// hostPathBase is where provisioned directories live, and the only place this binary
	// deletes anything: upstream's deleter accepts any /tmp/.+ path, this one only a
	// directory directly under hostPathBase (what it provisions), so a static hostPath PV
	// with the Delete policy can never make it remove an admin's directory.
	hostPathBase = "/tmp/hostpath_pv"
	// AnnCreatedBy is the annotation upstream's in-tree provisioners put on their PVs.
	AnnCreatedBy = "kubernetes.io/createdby"
	// hostPathCreatedBy is its value for the host-path provisioner.
	hostPathCreatedBy = "hostpath-dynamic-provisioner"
)

// Event reasons of provisioning by this binary, upstream's.
const (
	ReasonProvisioningSucceeded = "ProvisioningSucceeded"
)

// hostPathVolume is what the host-path provisioner makes for claim: a PV named name with a
// new directory under hostPathBase (not created yet), the claim's size and access modes
// (ReadWriteOnce if it asks none), pre-bound to the claim and marked as provisioned by the
// plugin, with the in-tree deletion finalizer under the Delete policy, as upstream.
func hostPathVolume(base, name string, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) *v1.PersistentVolume {
	modes := claim.Spec.AccessModes
	if len(modes) == 0 {
		modes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Annotations: map[string]string{
				AnnCreatedBy:                             hostPathCreatedBy,
				storagehelpers.AnnBoundByController:      "yes",
				storagehelpers.AnnDynamicallyProvisioned: hostPathPluginName,
			},
		},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: ptr.Deref(class.ReclaimPolicy, v1.PersistentVolumeReclaimDelete),
			AccessModes:                   modes,
			Capacity:                      v1.ResourceList{v1.ResourceStorage: requestedStorage(claim)},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				HostPath: &v1.HostPathVolumeSource{Path: filepath.Join(base, string(uuid.NewUUID()))},
			},
			ClaimRef: &v1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion,
			},
			StorageClassName: storagehelpers.GetPersistentVolumeClaimClass(claim),
		},
	}
	if pv.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimDelete {
		pv.Finalizers = []string{storagehelpers.PVDeletionInTreeProtectionFinalizer}
	}
	return pv
}

// provisionedName is the name of the PV provisioned for a claim, as upstream: one per claim
// UID, so a repeated attempt finds the PV of an earlier one.
func provisionedName(claim *v1.PersistentVolumeClaim) string { return "pvc-" + string(claim.UID) }

// provisionHostPath runs the host-path plugin for a claim already annotated for it. The
// error is nil when the claim is to wait (for its PV to arrive, or for the next resync
// after a failure reported by an event) and non-nil when an API call failed and the claim
// is to be retried with backoff.
func (c *Controller) provisionHostPath(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) error {
	logger := klog.FromContext(ctx)
	key := claimKey(claim.Namespace, claim.Name)
	fail := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		c.recorder.Event(claim, v1.EventTypeWarning, ReasonProvisioningFailed, msg)
		c.ops.end(key, errors.New(msg))
		return nil
	}
	if claim.Spec.DataSource != nil {
		return fail("plugin %q is not a CSI plugin. Only CSI plugin can provision a claim with a datasource", hostPathPluginName)
	}
	name := provisionedName(claim)
	if _, err := c.volume(name); err == nil {
		return nil // provisioned already: the claim binds it
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	if len(class.MountOptions) > 0 {
		return fail("Mount options are not supported by the provisioner but StorageClass %q has mount options %v", class.Name, class.MountOptions)
	}
	if !c.opts.HostPathProvisioner {
		return fail("Failed to create provisioner: provisioning in volume plugin %q is disabled", hostPathPluginName)
	}
	if ptr.Deref(claim.Spec.VolumeMode, v1.PersistentVolumeFilesystem) == v1.PersistentVolumeBlock {
		err := fmt.Errorf("%s does not support block volume provisioning", hostPathPluginName)
		c.metrics.observePluginCall(hostPathPluginName, opVolumeProvision, time.Now(), err)
		return fail("Failed to provision volume with StorageClass %q: %v", class.Name, err)
	}

	pv := hostPathVolume(c.hostPathBase, name, claim, class)
	dir := pv.Spec.HostPath.Path
	start := time.Now()
	err := os.MkdirAll(dir, 0o750)
	c.metrics.observePluginCall(hostPathPluginName, opVolumeProvision, start, err)
	if err != nil {
		return fail("Failed to provision volume with StorageClass %q: %v", class.Name, err)
	}
	// The PV names the claim, so the claim binds it; its phase is the volume sync's.
	// A sync before the informer delivers it finds no PV and tries again: AlreadyExists.
	_, err = c.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		// An earlier attempt's PV (made by this or a previous leader) is the claim's; the
		// directory just made is not needed.
		_ = os.Remove(dir)
		logger.V(3).Info("Volume for claim already exists, reusing", "pv", name)
		return nil
	case err != nil:
		// No PV refers to the directory: remove it, so a retry does not leave it behind.
		cleanup := os.Remove(dir)
		c.recorder.Event(claim, v1.EventTypeWarning, ReasonProvisioningFailed, fmt.Sprintf(
			"Error creating provisioned PV object for claim %s: %v. Deleting the volume.", key, err))
		if cleanup != nil && !os.IsNotExist(cleanup) {
			c.recorder.Event(claim, v1.EventTypeWarning, "ProvisioningCleanupFailed", fmt.Sprintf(
				"Error cleaning provisioned volume for claim %s: %v. Please delete manually.", key, cleanup))
		}
		c.ops.end(key, err)
		return fmt.Errorf("creating volume %s for claim %s: %w", name, key, err)
	}
	logger.V(2).Info("Volume provisioned for claim", "pv", name, "path", dir)
	c.recorder.Event(claim, v1.EventTypeNormal, ReasonProvisioningSucceeded,
		fmt.Sprintf("Successfully provisioned volume %s using %s", name, hostPathPluginName))
	return nil
}

// hostPathDeletable says why the host-path deleter refuses path, or nil: only a directory
// directly under base, named without any way out of it.
func hostPathDeletable(base, path string) error {
	rel, ok := strings.CutPrefix(path, base+"/")
	if !ok || rel == "" || strings.Contains(rel, "/") || rel == "." || rel == ".." {
		return fmt.Errorf("host_path deleter only supports %s/<name> but received provided %s", base, path)
	}
	return nil
}

// deleteHostPath deletes a Released hostPath PV with the Delete policy: its directory (on
// this process's filesystem; one already gone counts as deleted, as upstream), then the
// in-tree finalizer, then the PV. A directory it may not delete marks the PV Failed.
// Called with the PV's lock held.
func (c *Controller) deleteHostPath(ctx context.Context, pv *v1.PersistentVolume) error {
	if pv.DeletionTimestamp != nil {
		return nil // deleted already; the pv-protection controller lets it go
	}
	if pv.Spec.HostPath == nil {
		return c.failVolume(ctx, pv, ReasonVolumeFailedDelete, fmt.Sprintf(
			"failed to create deleter for volume %q: spec.PersistentVolumeSource.HostPath is nil", pv.Name))
	}
	start := time.Now()
	err := hostPathDeletable(c.hostPathBase, pv.Spec.HostPath.Path)
	if err == nil {
		err = os.RemoveAll(pv.Spec.HostPath.Path)
	}
	c.metrics.observePluginCall(hostPathPluginName, opVolumeDelete, start, err)
	if err != nil {
		c.ops.end(pv.Name, err)
		if pv.Status.Phase == v1.VolumeFailed {
			return nil // reported already; the next resync tries again, as upstream
		}
		return c.failVolume(ctx, pv, ReasonVolumeFailedDelete, err.Error())
	}
	klog.FromContext(ctx).V(2).Info("Volume deleted", "path", pv.Spec.HostPath.Path)
	if slices.Contains(pv.Finalizers, storagehelpers.PVDeletionInTreeProtectionFinalizer) {
		updated := pv.DeepCopy()
		updated.Finalizers = slices.DeleteFunc(updated.Finalizers, func(f string) bool {
			return f == storagehelpers.PVDeletionInTreeProtectionFinalizer
		})
		if len(updated.Finalizers) == 0 {
			updated.Finalizers = nil
		}
		written, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
		if err != nil {
			c.ops.end(pv.Name, err)
			return fmt.Errorf("removing the in-tree finalizer of volume %s: %w", pv.Name, err)
		}
		c.volumes.Wrote(pv.Name, updated.ResourceVersion, written)
		pv = written
	}
	// Conditioned on the UID and version read: a PV of the same name made since, or one
	// changed since (bound again by an admin), is not deleted.
	err = c.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pv.UID, ResourceVersion: &pv.ResourceVersion},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		c.ops.end(pv.Name, err)
		return fmt.Errorf("deleting volume %s: %w", pv.Name, err)
	}
	return nil
}
