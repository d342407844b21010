// Syncing one Service: ensure it holds valid addresses and shows them, or release them once
// it no longer wants a load balancer of this controller.

package servicelb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/allocation"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// syncService makes the Service named by key hold valid addresses and shows them in its
// status, or releases them once it no longer wants a load balancer. It reads only from the
// caches and writes only on a real difference.
func (c *Controller) syncService(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping malformed key", "key", key)
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("service", key)
	ctx = klog.NewContext(ctx, logger)
	start := time.Now()
	defer func() { logger.V(4).Info("Finished syncing service", "duration", time.Since(start)) }()

	svc, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		// Deleted without our finalizer (or after we removed it): forget it.
		c.stale.Forget(key)
		return c.releaseGone(ctx, key)
	}
	if err != nil {
		return err
	}
	if c.stale.Stale(key, svc) {
		// The cache is behind our own last write; its update event brings the key back.
		// The delayed requeue is a safety net only.
		logger.V(4).Info("Cache still has a version this controller replaced; waiting for it to catch up", "resourceVersion", svc.ResourceVersion)
		return worker.RequeueAfter(time.Second)
	}

	if handles(svc, c.opts.LoadBalancerClass) && svc.DeletionTimestamp == nil {
		err = c.ensure(ctx, key, svc)
	} else {
		err = c.cleanup(ctx, key, svc)
	}
	var rq *worker.Requeue
	if err != nil && !errors.As(err, &rq) {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonSyncFailed, "Error syncing load balancer: %v", err)
	}
	return err
}

// releaseGone forgets the addresses of a Service the cache no longer has. Their claims are
// deleted only once a live read confirms that the Service is gone (or is a new one of the
// same name): a cache miss alone never frees an address for other processes.
func (c *Controller) releaseGone(ctx context.Context, key string) error {
	held := c.state.Assigned(key)
	if len(held) == 0 {
		c.release(ctx, key)
		return nil
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	live, err := c.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("confirming that the Service is gone: %w", err)
	}
	if err == nil && live.DeletionTimestamp == nil && handles(live, c.opts.LoadBalancerClass) {
		// Only the cache misses it; its add event brings it back.
		return worker.RequeueAfter(time.Second)
	}
	freed := c.release(ctx, key)
	c.deleteClaims(ctx, key, freed)
	return nil
}

// cleanupReason says why a Service no longer gets a load balancer from this controller.
func cleanupReason(svc *v1.Service, class string) string {
	switch {
	case svc.DeletionTimestamp != nil:
		return "the Service is being deleted"
	case svc.Spec.Type != v1.ServiceTypeLoadBalancer:
		return fmt.Sprintf("the Service's type is now %s", svc.Spec.Type)
	case svc.Spec.LoadBalancerClass != nil:
		return fmt.Sprintf("the Service's loadBalancerClass is now %q", *svc.Spec.LoadBalancerClass)
	default:
		return fmt.Sprintf("the Service has no loadBalancerClass but this controller serves %q", class)
	}
}

// cleanup releases the Service's addresses: its status is cleared (unless it is going
// away), then the finalizer removed, and only then are the addresses handed out again and
// their claims deleted, so two Services never show one address.
func (c *Controller) cleanup(ctx context.Context, key string, svc *v1.Service) error {
	heldAddrs, e := c.state.BeginCleanup(key)
	c.apply(e)
	held := len(heldAddrs) > 0
	why := cleanupReason(svc, c.opts.LoadBalancerClass)
	// Our finalizer on a Service of another class belongs to that class's controller. A
	// Service whose type changed while no controller ran has lost its class too (the
	// apiserver drops it with the type): an address claim of ours made for this very
	// Service says it was ours.
	var claimed []netip.Addr
	if hasFinalizer(svc) && !held {
		claimed = c.claimedFor(svc)
	}
	ours := held || len(claimed) > 0 || handles(svc, c.opts.LoadBalancerClass) || (svc.Spec.Type != v1.ServiceTypeLoadBalancer && c.opts.LoadBalancerClass == "")
	if !hasFinalizer(svc) || !ours {
		if held {
			c.deleteClaims(ctx, key, c.release(ctx, key))
			c.recorder.Eventf(svc, v1.EventTypeNormal, ReasonAddressReleased, "Released %s: %s", joinAddrs(heldAddrs), why)
		}
		return nil
	}
	c.recorder.Event(svc, v1.EventTypeNormal, ReasonDeleting, "Deleting load balancer")
	if svc.DeletionTimestamp == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
		if err := c.patchIngress(ctx, svc, nil); err != nil && !apierrors.IsNotFound(err) {
			if apierrors.IsConflict(err) {
				c.metrics.conflicts.WithLabelValues(conflictStale).Inc()
			}
			return fmt.Errorf("clearing load balancer status: %w", err)
		}
	}
	if err := c.removeFinalizer(ctx, svc); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing load balancer cleanup finalizer: %w", err)
	}
	freed := c.release(ctx, key)
	freed = append(freed, c.state.Unheld(claimed)...) // a Service sharing one keeps its claim
	c.deleteClaims(ctx, key, freed)
	c.metrics.lbSync.Inc()
	if held {
		c.recorder.Eventf(svc, v1.EventTypeNormal, ReasonAddressReleased, "Released %s: %s", joinAddrs(heldAddrs), why)
	}
	c.recorder.Event(svc, v1.EventTypeNormal, ReasonDeleted, "Deleted load balancer")
	return nil
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// release forgets key's addresses and, when that freed any, retries the Services waiting.
// It returns the addresses nobody holds any more.
func (c *Controller) release(ctx context.Context, key string) []netip.Addr {
	held, freed, e := c.state.Release(key)
	if len(held) > 0 {
		klog.FromContext(ctx).V(2).Info("Released addresses", "service", key, "addresses", held)
	}
	c.apply(e)
	return freed
}

// deleteClaims deletes key's claims of addresses released for a verified reason. A failure
// is logged only: the sweep deletes what is left.
func (c *Controller) deleteClaims(ctx context.Context, key string, addrs []netip.Addr) {
	for _, a := range addrs {
		if err := c.deleteClaim(ctx, key, a, ""); err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "Cannot delete address claim; the orphan sweep will", "service", key, "address", a)
		}
	}
}

// maxClaimAttempts bounds how often one sync picks another address after finding the one it
// chose claimed by another Service; then the sync fails and retries with backoff.
const maxClaimAttempts = 4

// ensure adds the finalizer, assigns and claims addresses and writes them to the status.
func (c *Controller) ensure(ctx context.Context, key string, svc *v1.Service) error {
	plan, err := c.assignAndClaim(ctx, key, svc)
	if err != nil {
		return err
	}
	if plan.BadInput != nil && plan.NewBadInput {
		// The Service asks for something that cannot work as written; an update of the
		// Service brings it back here, and retrying or repeating the event would add
		// nothing.
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonSyncFailed, "Error syncing load balancer: %v", plan.BadInput)
	}
	statusChange := !allocation.IngressEqual(svc.Status.LoadBalancer.Ingress, plan.Ingress)
	if hasFinalizer(svc) && !statusChange {
		c.report(svc, plan)
		c.deleteClaims(ctx, key, plan.Freed)
		if _, err := c.syncCondition(ctx, svc, plan); err != nil {
			return fmt.Errorf("updating the %s condition: %w", ConditionLoadBalancerPending, err)
		}
		return nil
	}
	if statusChange {
		if wait := c.waitForOverwriter(ctx, key, svc, plan); wait > 0 {
			return worker.RequeueAfter(wait)
		}
	}
	c.recorder.Event(svc, v1.EventTypeNormal, ReasonEnsuring, "Ensuring load balancer")
	if !hasFinalizer(svc) {
		// The finalizer goes on before any address shows in the status, so the Service
		// cannot go away without its address being released.
		updated, err := c.addFinalizer(ctx, svc)
		if err != nil {
			c.rollback(key, svc)
			return fmt.Errorf("adding load balancer cleanup finalizer: %w", err)
		}
		svc = updated
	}
	if statusChange {
		if svc, err = c.writeIngress(ctx, key, svc, plan); err != nil {
			return err
		}
	}
	c.deleteClaims(ctx, key, plan.Freed)
	if c.nodeCount() == 0 {
		c.recorder.Event(svc, v1.EventTypeWarning, ReasonUnavailable, "There are no available nodes for LoadBalancer")
	}
	if len(plan.Ingress) > 0 {
		c.recorder.Eventf(svc, v1.EventTypeNormal, ReasonEnsured, "Ensured load balancer: %s", plan.Describe())
	}
	c.report(svc, plan)
	if _, err := c.syncCondition(ctx, svc, plan); err != nil {
		return fmt.Errorf("updating the %s condition: %w", ConditionLoadBalancerPending, err)
	}
	return nil
}

// assignAndClaim has the state decide which addresses svc holds and claims them, choosing
// again (up to maxClaimAttempts times) when a chosen address is claimed by another Service.
func (c *Controller) assignAndClaim(ctx context.Context, key string, svc *v1.Service) (allocation.Assignment, error) {
	logger := klog.FromContext(ctx)
	adopt, err := c.adoptable(ctx, key, svc)
	if err != nil {
		return allocation.Assignment{}, err
	}
	var plan allocation.Assignment
	var takenMoves []allocation.Move
	for attempt := 1; ; attempt++ {
		plan = c.assign(ctx, key, svc, adopt)
		err := c.claimAll(ctx, key, svc, plan)
		if err == nil {
			break
		}
		var taken *claimTakenError
		if errors.As(err, &taken) && attempt < maxClaimAttempts {
			logger.V(2).Info("Chosen address is claimed by another Service; choosing another", "address", taken.addr, "owner", taken.owner)
			if containsAddr(statusAddrs(svc), taken.addr) {
				takenMoves = append(takenMoves, allocation.Move{From: taken.addr, Why: taken.Error()})
			}
			continue
		}
		c.rollback(key, svc)
		return allocation.Assignment{}, err
	}
	plan.Moved = append(takenMoves, plan.Moved...)
	return plan, nil
}

// assign has the state decide which addresses the Service holds, then queues and shows what
// follows from it.
func (c *Controller) assign(ctx context.Context, key string, svc *v1.Service, adopt []netip.Addr) allocation.Assignment {
	in := allocation.Inputs{NSLabels: c.namespaceLabels(svc.Namespace), Known: c.poolsKnown()}
	plan := c.state.Assign(klog.FromContext(ctx), key, svc, adopt, in)
	c.apply(plan.Effects)
	return plan
}

func (c *Controller) namespaceLabels(name string) labels.Set {
	ns, err := c.namespaces.Get(name)
	if err != nil {
		return nil
	}
	return labels.Set(ns.Labels)
}

// waitForOverwriter returns how long to wait before writing plan's status when someone else
// keeps changing it (0: write now), with one Warning per episode.
func (c *Controller) waitForOverwriter(ctx context.Context, key string, svc *v1.Service, plan allocation.Assignment) time.Duration {
	wait, newEpisode := c.overwriteBackoff(key, svc, plan.Ingress)
	if newEpisode {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonStatusOverwritten,
			"status.loadBalancer was changed by another writer to %q; restoring %s with backoff (is another load balancer controller, or a second service-lb-controller, running?)",
			describeIngress(svc.Status.LoadBalancer.Ingress), plan.Describe())
	}
	if wait > 0 {
		c.report(svc, plan)
		klog.FromContext(ctx).V(2).Info("Status overwritten by another writer; backing off", "wait", wait)
	}
	return wait
}

// writeIngress shows plan's addresses in svc's status, with an Event per address moved; a
// failed write is rolled back. It returns the Service as written.
func (c *Controller) writeIngress(ctx context.Context, key string, svc *v1.Service, plan allocation.Assignment) (*v1.Service, error) {
	for _, m := range plan.Moved {
		if len(plan.Ingress) == 0 {
			c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonAddressReassigned, "Address %s is no longer valid for this Service (%s); released, waiting for another", m.From, m.Why)
			continue
		}
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonAddressReassigned, "Address %s is no longer valid for this Service (%s); moved to %s", m.From, m.Why, plan.Describe())
	}
	out, err := c.patchStatus(ctx, svc, map[string]any{"loadBalancer": map[string]any{"ingress": nilIfEmpty(plan.Ingress)}})
	if err != nil {
		if apierrors.IsConflict(err) {
			// Someone wrote the Service after the version this decision was made on.
			c.metrics.conflicts.WithLabelValues(conflictStale).Inc()
		}
		c.rollback(key, svc)
		return svc, fmt.Errorf("updating load balancer status: %w", err)
	}
	c.state.Wrote(key, plan.Ingress)
	klog.FromContext(ctx).V(2).Info("Updated load balancer status", "addresses", plan.Describe())
	c.metrics.lbSync.Inc()
	return out, nil
}

// report emits AllocationFailed when svc has just become pending, and AddressUnverified
// when it has just begun to keep an address no pool vouches for.
func (c *Controller) report(svc *v1.Service, plan allocation.Assignment) {
	if plan.NewlyPending {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonAllocationFailed, "Failed to allocate an address: %v; will retry as soon as an address frees up", plan.PendingWhy)
	}
	if plan.NewUnverified {
		var s []string
		for _, a := range slices.SortedFunc(maps.Keys(plan.Unverified), netip.Addr.Compare) {
			s = append(s, fmt.Sprintf("%s (%s)", a, plan.Unverified[a]))
		}
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonAddressUnverified,
			"Keeping %s although no pool can vouch for it now; it stays reserved for this Service and is moved only for a verified reason", strings.Join(s, ", "))
	}
}

// adoptable returns the addresses in svc's status that key does not hold here but that are
// claimed for svc: another process (a split brain) assigned them. Taking them over ends the
// disagreement instead of overwriting each other.
func (c *Controller) adoptable(ctx context.Context, key string, svc *v1.Service) ([]netip.Addr, error) {
	held := c.state.Assigned(key)
	var out []netip.Addr
	for _, a := range statusAddrs(svc) {
		if containsAddr(held, a) {
			continue
		}
		claim, err := c.claims.Get(claimName(a))
		if apierrors.IsNotFound(err) {
			claim, err = c.client.NetworkingV1().IPAddresses().Get(ctx, claimName(a), metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the claim of %s: %w", a, err)
		}
		if claim.Labels[networkingv1.LabelManagedBy] == ClaimManagedBy && claimMayUse(claim, svc) {
			out = append(out, a)
		}
	}
	return out, nil
}

// claimAll makes sure every address of plan is claimed for svc. An address found claimed
// by another Service is dropped here and recorded as that Service's, and a
// *claimTakenError returned, so the caller assigns again.
func (c *Controller) claimAll(ctx context.Context, key string, svc *v1.Service, plan allocation.Assignment) error {
	shown := statusAddrs(svc)
	for _, in := range plan.Ingress {
		a, err := addrpool.ParseAddr(in.IP)
		if err != nil {
			continue
		}
		err = c.ensureClaim(ctx, svc, a, c.state.PoolOf(a), containsAddr(shown, a))
		var taken *claimTakenError
		if errors.As(err, &taken) {
			// Reserved here until its claim is deleted, so the next choice is another
			// address; the owner's sync takes it over if it shows it.
			e := c.state.TakenElsewhere(key, a, taken.key)
			if ns, _, err := cache.SplitMetaNamespaceKey(taken.owner); err == nil && ns != "" {
				e.Requeue = append(e.Requeue, taken.owner)
			}
			c.apply(e)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// rollback undoes a sync whose writes failed: addresses taken that the status does not show
// are given back here. Their claims stay: a claim is the Service's, not this process's, and
// after a conflict another process may have shown that very address, relying on the claim.
// The next sync takes the address again (the claim is the Service's) or takes over what the
// other process showed; a claim left unused is deleted by the sweep.
func (c *Controller) rollback(key string, svc *v1.Service) {
	c.apply(c.state.Rollback(key, statusAddrs(svc)))
}
