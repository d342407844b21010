package pvbinder

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/worker"
)

// Event reasons, upstream's.
const (
	ReasonFailedBinding        = "FailedBinding"
	ReasonVolumeMismatch       = "VolumeMismatch"
	ReasonWaitForFirstConsumer = "WaitForFirstConsumer"
	ReasonWaitForPodScheduled  = "WaitForPodScheduled"
	ReasonExternalProvisioning = "ExternalProvisioning"
	ReasonProvisioningFailed   = "ProvisioningFailed"
	ReasonClaimLost            = "ClaimLost"
	ReasonClaimMisbound        = "ClaimMisbound"
	ReasonVolumeFailedDelete   = "VolumeFailedDelete"
	ReasonVolumeFailedRecycle  = "VolumeFailedRecycle"
	ReasonVolumeUnknownReclaim = "VolumeUnknownReclaimPolicy"
	// ReasonOversizedVolumeBound is kcm-split's: a claim bound to a volume much larger than
	// it requests (--oversized-bind-event-ratio).
	ReasonOversizedVolumeBound = "OversizedVolumeBound"
	// ReasonVolumeRebound is kcm-split's: a Released volume bound again to a claim recreated
	// under its old claim's name (--enable-rebind-on-recreate).
	ReasonVolumeRebound = "VolumeRebound"
	// ReasonVolumeRebindRefused is kcm-split's: a recreated claim's previous volume opted in
	// to be given back but does not qualify (--enable-rebind-on-recreate).
	ReasonVolumeRebindRefused   = "VolumeRebindRefused"
	inTreeProvisionerNamePrefix = "kubernetes.io/"
)

// takenRetry is how soon a claim whose chosen PV was taken under it (by another process)
// tries again: long enough for the informer to deliver the change that beat it.
const takenRetry = 100 * time.Millisecond

func (c *Controller) syncClaimKey(ctx context.Context, key string) error {
	logger := klog.FromContext(ctx).WithValues("pvc", key)
	ctx = klog.NewContext(ctx, logger)
	start := time.Now()
	defer func() { logger.V(4).Info("Finished syncing claim", "duration", time.Since(start)) }()

	claim, err := c.claim(key)
	if apierrors.IsNotFound(err) {
		c.waiting.remove(key)
		return nil
	}
	if err != nil {
		return err
	}
	if claim, err = c.annotateClaimMigration(ctx, key, claim); err != nil {
		return err
	}
	if !metav1.HasAnnotation(claim.ObjectMeta, storagehelpers.AnnBindCompleted) {
		return c.syncUnboundClaim(ctx, key, claim)
	}
	return c.syncBoundClaim(ctx, claim)
}

// syncUnboundClaim handles a claim whose bind has not completed.
func (c *Controller) syncUnboundClaim(ctx context.Context, key string, claim *v1.PersistentVolumeClaim) error {
	logger := klog.FromContext(ctx)
	// Before anything else: a recreated claim about to get its previous volume back must not
	// be handed to a provisioner or told its volume is bound to another claim.
	if c.opts.RebindOnRecreate {
		if handled, err := c.tryRebind(ctx, claim); handled || err != nil {
			return err
		}
	}
	if claim.Spec.VolumeName != "" {
		return c.syncRequestedVolume(ctx, claim)
	}
	// A class that does not exist binds immediately, as upstream; one without a binding mode
	// is an error.
	delayBinding, err := storagehelpers.IsDelayBindingMode(claim, c.classLister)
	if err != nil {
		return err
	}
	pvs, err := c.listVolumes()
	if err != nil {
		return err
	}

	pv, err := c.chooseVolume(key, claim, pvs, delayBinding)
	if err != nil {
		return err
	}
	if pv != nil {
		return c.bindChosen(ctx, key, pv, claim)
	}

	// A PV that fits is about to become Available (the volume loop has yet to write its
	// phase): the claim waits for it, woken when it is. Reporting no volume, or asking a
	// provisioner for one, would be wrong and would cost an Event or a claim update per
	// claim in a burst of PV/claim pairs. Upstream does both, then binds on its resync.
	if !delayBinding && slices.ContainsFunc(pvs, func(pv *v1.PersistentVolume) bool {
		return becomingAvailable(pv) && couldServe(pv, claim)
	}) {
		logger.V(4).Info("A fitting volume is about to become Available; waiting for it")
		return nil
	}

	// No PV: the default class, dynamic provisioning, or wait.
	if updated, err := c.assignDefaultClass(ctx, key, claim); err != nil || updated {
		return err
	}
	class := storagehelpers.GetPersistentVolumeClaimClass(claim)
	switch {
	case delayBinding && !storagehelpers.IsDelayBindingProvisioning(claim):
		// The scheduler pre-binds a PV (or asks for one with selected-node); either change
		// brings the claim back. Bind wake-ups would only repeat this event.
		c.waiting.remove(key)
		pods, err := podsOf(c.pods, key)
		if err != nil {
			return err
		}
		reason, message := waitForConsumerEvent(unscheduledConsumers(pods))
		c.recorder.Event(claim, v1.EventTypeNormal, reason, message)
	case class != "":
		// Provisioning; the claim's status stays as it is until a PV appears.
		return c.provision(ctx, key, claim, class)
	default:
		c.recorder.Event(claim, v1.EventTypeNormal, ReasonFailedBinding, "no persistent volumes available for this claim and no storage class is set")
	}
	_, err = c.updateClaimStatus(ctx, key, claim, v1.ClaimPending, nil)
	return err
}

// chooseVolume chooses the best PV of pvs for claim and reserves it, in one step, so two
// workers never choose the same PV. Without one, the claim joins the waiting list under the
// same lock, so a PV that becomes Available after this choice finds it there and wakes it.
func (c *Controller) chooseVolume(key string, claim *v1.PersistentVolumeClaim, pvs []*v1.PersistentVolume, delayBinding bool) (*v1.PersistentVolume, error) {
	c.matchMu.Lock()
	defer c.matchMu.Unlock()
	pv, err := findBestMatch(claim, pvs, delayBinding, func(pv *v1.PersistentVolume) bool {
		holder, ok := c.reserved[pv.Name]
		return ok && holder != claim.UID
	})
	if pv != nil {
		c.reserveLocked(pv.Name, claim.UID)
		c.waiting.remove(key)
	} else if err == nil {
		c.waiting.add(key, claim.CreationTimestamp.Time)
	}
	return pv, err
}

// bindChosen binds claim to pv, which chooseVolume reserved for it, and releases the
// reservation.
func (c *Controller) bindChosen(ctx context.Context, key string, pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) error {
	klog.FromContext(ctx).V(4).Info("Binding claim to the best matching volume", "pv", pv.Name)
	defer c.release(pv.Name, claim.UID)
	// A provision under way ends here, as upstream: its failed binds count as errors.
	if err := c.bind(ctx, pv, claim); err != nil {
		c.ops.end(key, err)
		return err
	}
	c.ops.end(key, nil)
	c.queueOldestWaitingClaim()
	return nil
}

// syncRequestedVolume handles an unbound claim that names its volume (spec.volumeName).
func (c *Controller) syncRequestedVolume(ctx context.Context, claim *v1.PersistentVolumeClaim) error {
	key := claimKey(claim.Namespace, claim.Name)
	pv, err := c.volume(claim.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		// Not there yet (a provisioner or an admin may still create it): wait, Pending.
		_, err := c.updateClaimStatus(ctx, key, claim, v1.ClaimPending, nil)
		return err
	}
	if err != nil {
		return err
	}
	switch {
	case pv.Spec.ClaimRef == nil:
		if err := checkSatisfies(pv, claim); err != nil {
			c.recorder.Event(claim, v1.EventTypeWarning, ReasonVolumeMismatch,
				fmt.Sprintf("Cannot bind to requested volume %q: %s", pv.Name, err))
			_, err := c.updateClaimStatus(ctx, key, claim, v1.ClaimPending, nil)
			return err
		}
		return c.bindReserving(ctx, pv, claim)
	case storagehelpers.IsVolumeBoundToClaim(pv, claim):
		return c.bindReserving(ctx, pv, claim)
	default:
		msg := fmt.Sprintf("volume %q already bound to a different claim.", pv.Name)
		c.recorder.Event(claim, v1.EventTypeWarning, ReasonFailedBinding, msg)
		if metav1.HasAnnotation(claim.ObjectMeta, storagehelpers.AnnBoundByController) {
			// This binder named the volume for this claim, yet the volume names another:
			// only a bug or a hand edit gets here. Keep retrying; say so loudly.
			return fmt.Errorf("claim %s names volume %s, which is bound to %s", key, pv.Name, refKey(pv.Spec.ClaimRef))
		}
		_, err := c.updateClaimStatus(ctx, key, claim, v1.ClaimPending, nil)
		return err
	}
}

// syncBoundClaim keeps a bound claim bound, or marks it Lost or Misbound.
func (c *Controller) syncBoundClaim(ctx context.Context, claim *v1.PersistentVolumeClaim) error {
	key := claimKey(claim.Namespace, claim.Name)
	if claim.Spec.VolumeName == "" {
		return c.claimLost(ctx, key, claim, ReasonClaimLost, "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!")
	}
	pv, err := c.volume(claim.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return c.claimLost(ctx, key, claim, ReasonClaimLost, "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
	}
	if err != nil {
		return err
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == claim.UID {
		// Finish (or repair) the bind; every step is a no-op when already done.
		return c.bindReserving(ctx, pv, claim)
	}
	return c.claimLost(ctx, key, claim, ReasonClaimMisbound, "Two claims are bound to the same volume, this one is bound incorrectly")
}

func (c *Controller) claimLost(ctx context.Context, key string, claim *v1.PersistentVolumeClaim, reason, msg string) error {
	if claim.Status.Phase == v1.ClaimLost {
		return nil
	}
	updated, err := c.updateClaimStatus(ctx, key, claim, v1.ClaimLost, nil)
	if err != nil {
		return err
	}
	c.recorder.Event(updated, v1.EventTypeWarning, reason, msg)
	return nil
}

// bindReserving binds after reserving the PV, for binds that did not go through matching.
func (c *Controller) bindReserving(ctx context.Context, pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) error {
	if !c.reserve(pv.Name, claim.UID) {
		return worker.RequeueAfter(takenRetry)
	}
	defer c.release(pv.Name, claim.UID)
	return c.bind(ctx, pv, claim)
}

// bind runs the four writes of a bind, each only if needed. The PV's writes hold its lock.
// A conflict means someone else changed the object: the error sends the claim back for a
// fresh look, with backoff.
func (c *Controller) bind(ctx context.Context, chosen *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) error {
	key := claimKey(claim.Namespace, claim.Name)
	pv, err := c.bindVolume(ctx, chosen.Name, claim)
	if err != nil {
		return err
	}
	// The claim: volumeName and annotations, then status.
	updated := claim.DeepCopy()
	dirty := false
	if claim.Spec.VolumeName != pv.Name {
		updated.Spec.VolumeName = pv.Name
		if !metav1.HasAnnotation(updated.ObjectMeta, storagehelpers.AnnBoundByController) {
			metav1.SetMetaDataAnnotation(&updated.ObjectMeta, storagehelpers.AnnBoundByController, "yes")
		}
		dirty = true
	}
	if !metav1.HasAnnotation(updated.ObjectMeta, storagehelpers.AnnBindCompleted) {
		metav1.SetMetaDataAnnotation(&updated.ObjectMeta, storagehelpers.AnnBindCompleted, "yes")
		dirty = true
	}
	if dirty {
		written, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Update(ctx, updated, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("binding claim %s to volume %s: %w", key, pv.Name, err)
		}
		c.claims.Wrote(key, updated.ResourceVersion, written)
		claim = written
	}
	wasBound := claim.Status.Phase == v1.ClaimBound
	if _, err := c.updateClaimStatus(ctx, key, claim, v1.ClaimBound, pv); err != nil {
		return err
	}
	if !wasBound {
		klog.FromContext(ctx).V(2).Info("Claim bound", "pv", pv.Name)
		c.reportOversized(claim, pv)
	}
	return nil
}

// reportOversized writes an OversizedVolumeBound Event on a claim that has just become Bound
// to a volume at least --oversized-bind-event-ratio times the storage it requests: the claim
// gets, and its owner likely pays for, more than it asked, which nothing else shows. Once:
// only the sync that turns the claim Bound calls it.
func (c *Controller) reportOversized(claim *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
	ratio := c.opts.OversizedBindEventRatio
	want, have := requestedStorage(claim), capacityOf(pv)
	if ratio <= 0 || want.Sign() <= 0 {
		return
	}
	if got := have.AsApproximateFloat64() / want.AsApproximateFloat64(); got >= ratio {
		c.recorder.Eventf(claim, v1.EventTypeNormal, ReasonOversizedVolumeBound,
			"Bound to volume %q of %s, %.3g times the %s requested", pv.Name, have.String(), got, want.String())
	}
}

// bindVolume writes the PV's half of a bind: claimRef and phase Bound.
func (c *Controller) bindVolume(ctx context.Context, name string, claim *v1.PersistentVolumeClaim) (*v1.PersistentVolume, error) {
	c.pvLocks.LockKey(name)
	defer c.pvLocks.UnlockKey(name)
	pv, err := c.volume(name)
	if err != nil {
		return nil, err
	}
	if pv.Spec.ClaimRef != nil && !storagehelpers.IsVolumeBoundToClaim(pv, claim) {
		// Taken since the choice, by a process whose write we have now seen.
		return nil, worker.RequeueAfter(takenRetry)
	}
	// The library sets claimRef (kind, name, namespace, UID, resourceVersion) and marks a PV
	// this binder chose as bound-by-controller; a PV pre-bound by a user keeps saying so.
	updated, dirty, err := storagehelpers.GetBindVolumeToClaim(pv, claim)
	if err != nil {
		return nil, err
	}
	if dirty {
		// Conditioned on pv.ResourceVersion: if the PV changed since it was read (another
		// binder claimed it), this fails with a conflict instead of overwriting.
		written, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
		if err != nil {
			return nil, fmt.Errorf("binding volume %s to claim %s/%s: %w", name, claim.Namespace, claim.Name, err)
		}
		c.volumes.Wrote(name, updated.ResourceVersion, written)
		pv = written
	}
	return c.setVolumePhase(ctx, pv, v1.VolumeBound, "")
}

// updateClaimStatus writes the claim's phase and, for Bound, the access modes, capacity and
// attributes class of its volume; it writes nothing when they are already right.
func (c *Controller) updateClaimStatus(ctx context.Context, key string, claim *v1.PersistentVolumeClaim, phase v1.PersistentVolumeClaimPhase, pv *v1.PersistentVolume) (*v1.PersistentVolumeClaim, error) {
	updated := claim.DeepCopy()
	st := &updated.Status
	st.Phase = phase
	if pv == nil {
		st.AccessModes, st.Capacity, st.CurrentVolumeAttributesClassName = nil, nil, nil
	} else {
		st.AccessModes = pv.Spec.AccessModes
		if claim.Status.Phase != phase {
			// Capacity is set when the claim becomes Bound; afterwards it belongs to volume
			// expansion, which may report a size the PV does not show yet.
			capacity, ok := pv.Spec.Capacity[v1.ResourceStorage]
			if !ok {
				return nil, fmt.Errorf("volume %s has no storage capacity", pv.Name)
			}
			if pre, ok := pv.Annotations[AnnPreResizeCapacity]; ok {
				if q, err := resource.ParseQuantity(pre); err == nil {
					capacity = q
				}
			}
			st.Capacity = maps.Clone(st.Capacity)
			if st.Capacity == nil {
				st.Capacity = v1.ResourceList{}
			}
			if cur, ok := st.Capacity[v1.ResourceStorage]; !ok || cur.Cmp(capacity) != 0 {
				st.Capacity = v1.ResourceList{v1.ResourceStorage: capacity}
			}
			if claim.Status.Phase == v1.ClaimPending || claim.Status.Phase == "" {
				st.CurrentVolumeAttributesClassName = pv.Spec.VolumeAttributesClassName
			}
		}
	}
	if apiequality.Semantic.DeepEqual(claim.Status, updated.Status) {
		return claim, nil
	}
	written, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("updating status of claim %s to %s: %w", key, phase, err)
	}
	c.claims.Wrote(key, updated.ResourceVersion, written)
	return written, nil
}
