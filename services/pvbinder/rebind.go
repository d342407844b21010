package pvbinder

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/worker"
)

// AnnRebindOnRecreate opts a volume in to being bound again, once Released, to a new claim of
// the namespace and name its claimRef names (--enable-rebind-on-recreate; k/k#91847). Only
// the value "true" counts.
const AnnRebindOnRecreate = "pvbinder.kcm-split.io/rebind-on-recreate"

// Upstream leaves a Released volume with the Retain policy to an admin, who clears its
// claimRef by hand so that a claim deleted by mistake (or by a StatefulSet's owner) and created
// again can have its data back. With the flag, a volume whose admin said so in advance
// (AnnRebindOnRecreate) is handed back by the binder, under every check that makes it the
// same claim coming back and not another one taking someone's data:
//   - the volume is Released, Retain, opted in and not being deleted, and its claimRef
//     names the claim's namespace and name with another UID (its old claim);
//   - the old claim is gone for good: a live read of the name returns the new claim (the
//     name cannot be held by two objects, so the old UID no longer exists, and UIDs are
//     never reused), not only a cache that has not seen it;
//   - the volume still fits the claim (size, storage class, attributes class, volume mode,
//     access modes, selector), and the claim asks for no data source (it wants a new
//     volume filled from elsewhere) and names no other volume;
//   - exactly one volume qualifies;
//   - the claimRef is rewritten by an Update conditioned on the resourceVersion read, so of
//     two binders only one can win, and the rest of the bind is the usual one.
//
// A VolumeRebound Event on both the volume and the claim names the old and new claim UIDs; a
// claim whose opted-in volume does not qualify gets one VolumeRebindRefused Event saying why.

// errNotRebindable says why a volume cannot be bound again to a recreated claim.
var errNotRebindable = errors.New("not rebindable")

// previousVolumes returns the volumes that remember a claim of claim's namespace and name
// with another UID, opted in to rebinding, Retain and not Failed: the candidates to be given
// back to it, Released or about to be.
func previousVolumes(claim *v1.PersistentVolumeClaim, pvs []*v1.PersistentVolume) []*v1.PersistentVolume {
	var out []*v1.PersistentVolume
	for _, pv := range pvs {
		ref := pv.Spec.ClaimRef
		if ref == nil || ref.UID == "" || ref.UID == claim.UID || ref.Namespace != claim.Namespace || ref.Name != claim.Name {
			continue
		}
		if pv.Annotations[AnnRebindOnRecreate] != "true" || pv.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimRetain ||
			pv.Status.Phase == v1.VolumeFailed {
			continue
		}
		out = append(out, pv)
	}
	return out
}

// rebindRefusal says why pv, a previous volume of claim, cannot be given back to it, or nil.
func rebindRefusal(pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) error {
	switch {
	case claim.DeletionTimestamp != nil:
		return fmt.Errorf("%w: the claim is being deleted", errNotRebindable)
	case claim.Spec.VolumeName != "" && claim.Spec.VolumeName != pv.Name:
		return fmt.Errorf("%w: the claim names volume %q", errNotRebindable, claim.Spec.VolumeName)
	case claim.Spec.DataSource != nil || claim.Spec.DataSourceRef != nil:
		return fmt.Errorf("%w: the claim asks for a volume filled from a data source", errNotRebindable)
	}
	if err := checkSatisfies(pv, claim); err != nil {
		return fmt.Errorf("%w: %v", errNotRebindable, err)
	}
	if claim.Spec.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
		if err != nil || !s.Matches(labels.Set(pv.Labels)) {
			return fmt.Errorf("%w: the volume does not match the claim's selector", errNotRebindable)
		}
	}
	return nil
}

// tryRebind gives a recreated claim its previous volume back, if one qualifies. It reports
// whether it handled the claim: bound it, or made it wait for its previous volume to be
// Released (the old claim's deletion is still being processed; the volume's phase change
// queues the claim again). Otherwise the claim is bound as upstream would.
func (c *Controller) tryRebind(ctx context.Context, claim *v1.PersistentVolumeClaim) (bool, error) {
	logger := klog.FromContext(ctx)
	pvs, err := c.listVolumes()
	if err != nil {
		return true, err
	}
	candidates := previousVolumes(claim, pvs)
	if len(candidates) == 0 {
		return false, nil
	}
	if len(candidates) > 1 {
		c.refuseRebind(ctx, claim, candidates[0].Name, fmt.Sprintf("%d volumes remember this claim's name, none is given back", len(candidates)))
		return false, nil
	}
	pv := candidates[0]
	if err := rebindRefusal(pv, claim); err != nil {
		c.refuseRebind(ctx, claim, pv.Name, err.Error())
		return false, nil
	}
	if pv.Status.Phase != v1.VolumeReleased {
		// Still Bound to the old claim: the volume sync releases it first.
		logger.V(4).Info("Waiting for the previous volume of a recreated claim to be Released", "pv", pv.Name)
		return true, nil
	}
	if !c.reserve(pv.Name, claim.UID) {
		return true, worker.RequeueAfter(takenRetry)
	}
	defer c.release(pv.Name, claim.UID)
	rebound, err := c.rebindVolume(ctx, pv.Name, claim)
	if err != nil || rebound == nil {
		return true, err
	}
	return true, c.bind(ctx, rebound, claim)
}

// rebindVolume checks again, on the newest copy of the volume and under its lock, that it can
// be given back to claim, verifies with a live read that its old claim is gone, and rewrites
// its claimRef to claim. It returns nil (no error) when the volume no longer qualifies: the
// change that made it so queues the claim again.
func (c *Controller) rebindVolume(ctx context.Context, name string, claim *v1.PersistentVolumeClaim) (*v1.PersistentVolume, error) {
	c.pvLocks.LockKey(name)
	defer c.pvLocks.UnlockKey(name)
	pv, err := c.volume(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(previousVolumes(claim, []*v1.PersistentVolume{pv})) == 0 || pv.Status.Phase != v1.VolumeReleased || rebindRefusal(pv, claim) != nil {
		return nil, nil
	}
	live, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil // the new claim is gone too
	}
	if err != nil {
		return nil, fmt.Errorf("verifying that the old claim of volume %s is gone: %w", name, err)
	}
	if live.UID != claim.UID {
		// Deleted and created again since the cache saw it: that claim's own sync decides.
		return nil, nil
	}
	old := pv.Spec.ClaimRef.UID
	updated := pv.DeepCopy()
	// As a bind writes it; bound-by-controller is left as it was, so a volume an admin
	// pre-bound to this name stays the admin's choice.
	updated.Spec.ClaimRef = &v1.ObjectReference{
		Kind: "PersistentVolumeClaim", APIVersion: "v1",
		Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion,
	}
	// Conditioned on pv.ResourceVersion: another binder that rebound or changed it first
	// makes this fail with a conflict.
	written, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("rebinding volume %s to claim %s/%s: %w", name, claim.Namespace, claim.Name, err)
	}
	c.volumes.Wrote(name, updated.ResourceVersion, written)
	klog.FromContext(ctx).V(2).Info("Released volume given back to its recreated claim", "pv", name, "oldClaimUID", old, "claimUID", claim.UID)
	msg := fmt.Sprintf("Released volume %q bound again to claim %s/%s recreated under its old name: old claim UID %s, new claim UID %s",
		name, claim.Namespace, claim.Name, old, claim.UID)
	c.recorder.Event(written, v1.EventTypeNormal, ReasonVolumeRebound, msg)
	c.recorder.Event(claim, v1.EventTypeNormal, ReasonVolumeRebound, msg)
	return written, nil
}

// refuseRebind says once per claim (by UID) why its previous volume, opted in to be given
// back, is not: a Warning VolumeRebindRefused Event, since the claim then binds as upstream
// (another volume, a provisioned one, or none) and its owner expected its data. Resyncs of
// the same claim repeat only the log line.
func (c *Controller) refuseRebind(ctx context.Context, claim *v1.PersistentVolumeClaim, pvName, why string) {
	klog.FromContext(ctx).V(2).Info("Previous volume of a recreated claim is not given back", "pv", pvName, "reason", why)
	c.matchMu.Lock()
	_, told := c.rebindRefused[claim.UID]
	c.rebindRefused[claim.UID] = struct{}{}
	c.matchMu.Unlock()
	if !told {
		c.recorder.Event(claim, v1.EventTypeWarning, ReasonVolumeRebindRefused,
			fmt.Sprintf("Released volume %q is not bound again to this recreated claim: %s", pvName, why))
	}
}

// forgetRebindRefusal drops what refuseRebind remembers of a claim that is gone.
func (c *Controller) forgetRebindRefusal(uid types.UID) {
	c.matchMu.Lock()
	delete(c.rebindRefused, uid)
	c.matchMu.Unlock()
}
