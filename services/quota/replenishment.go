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

// replenishmentHandler returns the handler of one counted type. Creations need no sync
// (admission charged them); deletions and usage-changing updates give usage back at once.
func (c *Controller) replenishmentHandler(gr schema.GroupResource) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
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

// replenish queues the quotas of namespace that track gr, and only those. They go to the
// priority queue: usage given back unblocks creates admission is refusing right now, which
// must not wait behind a full recalculation of every quota.
func (c *Controller) replenish(gr schema.GroupResource, namespace string) {
	if namespace == "" {
		return
	}
	rqs, err := c.quotas.ResourceQuotas(namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, rq := range rqs {
		if tracksResource(rq.Spec.Hard, gr, c.opts.Claims) || tracksResource(rq.Status.Hard, gr, c.opts.Claims) {
			c.priority.Add(key(rq))
		}
	}
}
