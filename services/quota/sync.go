package quota

import (
	"context"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/worker"
)

// unknownRecheck is how soon a quota naming a type discovery has not found is synced again.
const unknownRecheck = 5 * time.Second

// uncountable is a resource type a sync could not count.
type uncountable struct {
	gr     schema.GroupResource
	names  []v1.ResourceName
	state  monitorState
	reason string
}

// usageCount is what one sync counted from the informers' caches.
type usageCount struct {
	used        v1.ResourceList
	counted     []schema.GroupResource
	uncountable []uncountable
	// recheck is how soon the quota must be synced again (0: no sooner than usual).
	recheck time.Duration
}

// recheckWithin brings the recheck forward to d, if d is set and sooner.
func (u *usageCount) recheckWithin(d time.Duration) {
	if d > 0 && (u.recheck == 0 || d < u.recheck) {
		u.recheck = d
	}
}

// add adds the usage one type measured.
func (u *usageCount) add(used v1.ResourceList) {
	for n, q := range used {
		// Pods and claims both charge extended resources: usage is their sum.
		if sum, ok := u.used[n]; ok {
			q.Add(sum)
		}
		u.used[n] = q
	}
}

// dropUncountable leaves out of used every name an uncountable type measures, so that it
// keeps its last value even where other types could be counted.
func (u *usageCount) dropUncountable() {
	for _, p := range u.uncountable {
		for _, n := range p.names {
			delete(u.used, n)
		}
	}
}

// syncQuota recomputes the usage of the quota named by key (namespace/name) from the
// informers' caches and writes its status when it differs. Resource types that cannot be
// counted keep their last usage; the rest is published all the same.
func (c *Controller) syncQuota(ctx context.Context, qkey string) error {
	c.locks.LockKey(qkey)
	defer c.locks.UnlockKey(qkey)
	namespace, name, err := cache.SplitMetaNamespaceKey(qkey)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping malformed key", "key", qkey)
		return nil
	}
	if c.opts.View != nil && !c.opts.View.Shard().Owns(namespace) {
		return nil // another shard's quota
	}
	logger := klog.FromContext(ctx).WithValues("resourceQuota", qkey)
	start := time.Now()
	defer func() { logger.V(4).Info("Finished syncing resource quota", "duration", time.Since(start)) }()

	rq, err := c.quotas.ResourceQuotas(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.written.Forget(qkey)
		c.staleness.forget(qkey)
		return nil
	}
	if err != nil {
		c.metrics.syncs.WithLabelValues(OutcomeError).Inc()
		return err
	}
	// A second event for the same quota often comes before the informer has delivered our
	// own last write: syncing from the stale copy would write again and lose a conflict.
	rq, _ = c.written.Latest(qkey, rq)

	now := c.now()
	c.staleness.seen(qkey, now)
	byResource := namesByResource(rq.Spec.Hard, c.opts.Claims)
	if c.waitingForInformer(byResource, logger) {
		c.metrics.syncs.WithLabelValues(OutcomeDeferred).Inc()
		return nil
	}
	u := c.countUsage(rq, byResource, now)
	c.warnUncountable(rq, u.counted, u.uncountable)

	updated, err := c.writeStatus(ctx, qkey, rq, u.used, c.uncountableAnnotation(u.uncountable), logger)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(u.uncountable) == 0 {
		// Counted in full and published (written now, or already right): the clock is
		// restarted from when the caches were read.
		c.staleness.counted(qkey, now)
	} else {
		c.staleness.uncounted(qkey, rq.UID, now)
	}
	return c.finishSync(updated, u)
}

// finishSync counts the sync's outcome and asks for the recheck the usage needs, if any.
func (c *Controller) finishSync(updated bool, u usageCount) error {
	outcome := OutcomeUnchanged
	if updated {
		outcome = OutcomeUpdated
	}
	if len(u.uncountable) > 0 {
		outcome = OutcomePartial
	}
	c.metrics.syncs.WithLabelValues(outcome).Inc()
	if u.recheck > 0 {
		return worker.RequeueAfter(u.recheck)
	}
	return nil
}

// waitingForInformer reports whether a type the quota counts is still listing (its informer
// just started). Such a quota is waited for: it is queued again the moment the type syncs or
// gives up, and syncing now would only publish an incomplete status to be rewritten a moment
// later.
func (c *Controller) waitingForInformer(byResource map[schema.GroupResource][]v1.ResourceName, logger klog.Logger) bool {
	for gr := range byResource {
		if _, state, _ := c.monitors.getOrStart(gr); state == stateStarting {
			logger.V(4).Info("Waiting for a resource type's informer", "resource", describeResource(gr))
			return true
		}
	}
	return false
}

// countUsage counts, per resource type the quota tracks, the usage of the names it measures.
// A name measured from several types keeps its last value when any of them failed: it is
// left out of used.
func (c *Controller) countUsage(rq *v1.ResourceQuota, byResource map[schema.GroupResource][]v1.ResourceName, now time.Time) usageCount {
	scopes := scopeRequirements(&rq.Spec)
	claims := c.claimEvaluator()
	u := usageCount{used: v1.ResourceList{}}
	for gr, names := range byResource {
		m, state, reason := c.monitors.getOrStart(gr)
		if state == stateUnknown && gr == claimsResource {
			// Where the apiserver serves no ResourceClaims, upstream has no claim evaluator:
			// an extended resource is the Pods' alone, and only the names claims alone
			// measure cannot be counted.
			names = slices.DeleteFunc(slices.Clone(names), func(n v1.ResourceName) bool { return claimSharesWithPods(n, c.opts.Claims) })
			if len(names) == 0 {
				continue
			}
		}
		if state != stateSynced {
			if state == stateUnknown {
				// A CRD created moments ago may not be served yet: ask discovery again and
				// look back in a while (a typo costs one cached sync every few seconds).
				c.requestDiscovery()
				u.recheckWithin(unknownRecheck)
			}
			u.uncountable = append(u.uncountable, uncountable{gr: gr, names: names, state: state, reason: reason})
			continue
		}
		objs, err := m.list(rq.Namespace)
		if err != nil {
			u.uncountable = append(u.uncountable, uncountable{gr: gr, names: names, state: stateFailing, reason: err.Error()})
			continue
		}
		used, after := calculate(evaluatorFor(gr, c.opts.PodResources, claims), objs, names, scopes, now)
		u.add(used)
		u.recheckWithin(after)
		u.counted = append(u.counted, gr)
	}
	u.dropUncountable()
	return u
}

// writeStatus writes the status the quota should have with usage used, and the value of its
// AnnUncountable annotation ("": none), if either differs from what rq holds, and reports
// whether it wrote. Both go in one write to the status subresource, which keeps the metadata
// it is sent: naming what cannot be counted costs no write of its own, and needs no right
// beyond the one to write status.
func (c *Controller) writeStatus(ctx context.Context, qkey string, rq *v1.ResourceQuota, used v1.ResourceList, uncountable string, logger klog.Logger) (bool, error) {
	status := desiredStatus(rq, used)
	if !statusChanged(rq, status) && rq.Annotations[AnnUncountable] == uncountable {
		return false, nil
	}
	updated := rq.DeepCopy()
	updated.Status = status
	setUncountable(updated, uncountable)
	stored, err := c.client.CoreV1().ResourceQuotas(rq.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) {
			c.metrics.syncs.WithLabelValues(OutcomeConflict).Inc()
		} else {
			c.metrics.syncs.WithLabelValues(OutcomeError).Inc()
		}
		return false, err
	}
	// Kept until a sync reads it, in place of the informer's copy, which has no
	// managed fields either (see run).
	stored.ManagedFields = nil
	c.written.Wrote(qkey, rq.ResourceVersion, stored)
	logger.V(4).Info("Updated quota status", "used", status.Used)
	return true, nil
}

// claimEvaluator is what charges ResourceClaims now: the DeviceClass mapping and claim index
// of the claims monitor and the Pods' cache, when they have synced.
func (c *Controller) claimEvaluator() claimEvaluator {
	e := claimEvaluator{opts: c.opts.Claims, charge: c.opts.PodResources}
	if !c.opts.Claims.ExtendedResources {
		return e
	}
	if m := c.monitors.syncedOnly(claimsResource); m != nil {
		e.classes = m.classMap
		e.ownedBy = claimsOwnedBy(m.informer.GetIndexer())
	}
	if m := c.monitors.syncedOnly(podsResource); m != nil {
		e.pod = podByName(m.informer.GetIndexer())
	}
	return e
}

// claimsOwnedBy looks claims up by owner in the claims monitor's index.
func claimsOwnedBy(indexer cache.Indexer) func(namespace string, uid types.UID) []*resourceapi.ResourceClaim {
	return func(namespace string, uid types.UID) []*resourceapi.ResourceClaim {
		objs, err := indexer.ByIndex(claimOwnerIndex, claimOwnerKey(namespace, uid))
		if err != nil {
			return nil
		}
		out := make([]*resourceapi.ResourceClaim, 0, len(objs))
		for _, o := range objs {
			if claim, ok := o.(*resourceapi.ResourceClaim); ok {
				out = append(out, claim)
			}
		}
		return out
	}
}

// podByName looks Pods up in the Pods monitor's cache.
func podByName(indexer cache.Indexer) func(namespace, name string) *v1.Pod {
	return func(namespace, name string) *v1.Pod {
		obj, ok, err := indexer.GetByKey(namespace + "/" + name)
		if err != nil || !ok {
			return nil
		}
		pod, _ := obj.(*v1.Pod)
		return pod
	}
}
