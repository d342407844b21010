package quota

import (
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
)

// replenishmentHandler returns the handler of one counted type. Deletions and usage-changing
// updates give usage back at once. Creations were charged by admission, yet each is followed by
// one sync, chargeRecheck later (see recountAfterCreate); objects of the informer's first list
// are not (the type's sync, enqueueTracking, covers them).
func (c *Controller) replenishmentHandler(gr schema.GroupResource) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList {
				c.recountAfterCreate(gr, namespaceOf(obj))
			}
		},
		UpdateFunc: func(old, cur any) {
			if usageChanged(gr, old, cur, c.now(), c.opts.PodResources) {
				c.replenish(gr, namespaceOf(cur))
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			c.replenish(gr, namespaceOf(obj))
		},
	}
}

func namespaceOf(obj any) string {
	if o, ok := obj.(metav1.Object); ok {
		return o.GetNamespace()
	}
	return ""
}

// usageChanged reports whether an update of an object of gr can change any quota's usage.
// Plain counts change only on create and delete.
func usageChanged(gr schema.GroupResource, old, cur any, now time.Time, charge resourcehelper.PodResourcesOptions) bool {
	switch gr {
	case podsResource:
		o, ok1 := old.(*v1.Pod)
		n, ok2 := cur.(*v1.Pod)
		return ok1 && ok2 && podUsageChanged(o, n, now, charge)
	case servicesResource:
		o, ok1 := old.(*v1.Service)
		n, ok2 := cur.(*v1.Service)
		return ok1 && ok2 && serviceUsageChanged(o, n)
	case pvcsResource:
		o, ok1 := old.(*v1.PersistentVolumeClaim)
		n, ok2 := cur.(*v1.PersistentVolumeClaim)
		return ok1 && ok2 && pvcUsageChanged(o, n)
	case claimsResource:
		o, ok1 := old.(*resourceapi.ResourceClaim)
		n, ok2 := cur.(*resourceapi.ResourceClaim)
		return ok1 && ok2 && claimUsageChanged(o, n)
	}
	return false
}

// quotasTracking lists the cached quotas of namespace whose spec or status limits gr; none
// for a cluster-scoped object (namespace "").
func (c *Controller) quotasTracking(gr schema.GroupResource, namespace string) []*v1.ResourceQuota {
	if namespace == "" {
		return nil
	}
	rqs, err := c.quotas.ResourceQuotas(namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*v1.ResourceQuota
	for _, rq := range rqs {
		if tracksResource(rq.Spec.Hard, gr, c.opts.Claims) || tracksResource(rq.Status.Hard, gr, c.opts.Claims) {
			out = append(out, rq)
		}
	}
	return out
}

// replenish queues the quotas of namespace that track gr, and only those. They go to the
// priority queue: usage given back unblocks creates admission is refusing right now, which
// must not wait behind a full recalculation of every quota.
func (c *Controller) replenish(gr schema.GroupResource, namespace string) {
	for _, rq := range c.quotasTracking(gr, namespace) {
		c.priority.Add(key(rq))
	}
}

// recountAfterCreate queues the quotas of namespace that track gr for one sync chargeRecheck
// from now, in the primary queue (nothing waits on it: admission charged the create). Upstream
// does nothing on a create, and so undoes admission's charge whenever a sync reads the quota
// after the charge but the object's cache before the object (two watches, in no order between
// them; a busy apiserver or a cold start, whose first sync counts the objects of a list
// older than the quota it writes): the sync writes the lower count, and nothing but the
// 5-minute recalculation raises it again, while admission lets the namespace over its quota
// meanwhile. An object's creation event comes after it is in the cache, so this sync counts
// it; however late its cache, no under-count it caused outlives it. One sync per quota per
// chargeRecheck however many creations: it merges with the charge's own recheck (onQuotaUpdate),
// and finding nothing to change it writes nothing.
func (c *Controller) recountAfterCreate(gr schema.GroupResource, namespace string) {
	for _, rq := range c.quotasTracking(gr, namespace) {
		c.primary.AddAfter(key(rq), c.chargeRecheck)
	}
}
