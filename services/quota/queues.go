package quota

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Which quota goes into which of the two queues, and when: quota events, a type's informer
// syncing, and the periodic full recalculation. Replenishment is in replenishment.go.

// key is a quota's key in both queues: namespace/name.
func key(rq *v1.ResourceQuota) string { return rq.Namespace + "/" + rq.Name }

// onQuotaAdd queues a quota, in the priority queue while its status lacks what admission needs
// (see needsPriority).
func (c *Controller) onQuotaAdd(obj any) {
	rq, ok := obj.(*v1.ResourceQuota)
	if !ok {
		return
	}
	if needsPriority(rq, c.opts.Claims) {
		c.priority.Add(key(rq))
		return
	}
	c.primary.Add(key(rq))
}

// chargeRecheck is how long after a status update that raised usage (admission charging a
// create) the quota is synced again.
const chargeRecheck = time.Second

// onQuotaUpdate syncs a quota whose spec.hard changed. Status updates are by far the most
// frequent and upstream's controller ignores them all; but one that raises usage is admission
// charging a create, and a replenishment sync that read the quota just before it (the Pod's
// deletion event can overtake the quota's update) found nothing to change and left that charge
// in place until the next full recalculation (5 minutes). So such an update is followed by one
// sync a second later, a single one per quota however many charges come in that second.
func (c *Controller) onQuotaUpdate(old, cur any) {
	o, ok1 := old.(*v1.ResourceQuota)
	n, ok2 := cur.(*v1.ResourceQuota)
	if !ok1 || !ok2 {
		return
	}
	if !apiequality.Semantic.DeepEqual(o.Spec.Hard, n.Spec.Hard) {
		c.onQuotaAdd(n)
		return
	}
	if usageRaised(o.Status.Used, n.Status.Used) {
		c.primary.AddAfter(key(n), c.chargeRecheck)
	}
}

// usageRaised reports whether any resource is used more in cur than in old.
func usageRaised(old, cur v1.ResourceList) bool {
	for name, q := range cur {
		if was, ok := old[name]; !ok || q.Cmp(was) > 0 {
			return true
		}
	}
	return false
}

// onQuotaDelete forgets the warnings written about a quota that is gone, and its staleness
// series.
func (c *Controller) onQuotaDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if rq, ok := obj.(*v1.ResourceQuota); ok {
		c.forgetWarnings(key(rq))
		c.staleness.forget(key(rq))
		// A sync that read the quota just before it went can start its clock again after
		// the line above: one more sync, which finds it gone, drops it for good.
		c.primary.Add(key(rq))
	}
}

// enqueueTracking queues every quota tracking gr: its informer has just synced or given up.
func (c *Controller) enqueueTracking(gr schema.GroupResource) {
	rqs, err := c.quotas.List(labels.Everything())
	if err != nil {
		return
	}
	for _, rq := range rqs {
		if tracksResource(rq.Spec.Hard, gr, c.opts.Claims) {
			c.priority.Add(key(rq))
		}
	}
}

// fullRecalculationLoop queues every quota every sync period.
func (c *Controller) fullRecalculationLoop(ctx context.Context) {
	t := time.NewTicker(c.opts.SyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.enqueueAll(ctx)
		}
	}
}

// enqueueAll queues every quota for a full recalculation.
func (c *Controller) enqueueAll(ctx context.Context) {
	rqs, err := c.quotas.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot list quotas for the full recalculation")
		return
	}
	for _, rq := range rqs {
		c.primary.Add(key(rq))
	}
	klog.FromContext(ctx).V(4).Info("Queued every quota for a full recalculation", "quotas", len(rqs))
}
