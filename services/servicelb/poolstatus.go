// IPAddressPool status: validity conditions and usage of each pool, written back with
// backoff on conflicts.

package servicelb

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

// refreshPools re-reads every IPAddressPool from the cache and hands the result to the
// allocator; every handled Service is then queued, so those holding an address no pool
// contains any more are moved, and those waiting try again.
func (c *Controller) refreshPools() {
	var objs []*v1alpha1.IPAddressPool
	var own []any
	if c.ownAPI {
		own = c.poolCache().List()
	}
	for _, o := range own {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		p, err := v1alpha1.FromUnstructured(u)
		if err != nil {
			utilruntime.HandleError(err)
			continue
		}
		objs = append(objs, p)
	}
	var parsed []parsedPool
	for _, o := range objs {
		parsed = append(parsed, parsedPool{created: o.CreationTimestamp, info: parsePool(o)})
	}
	if c.metalLBAPI {
		store, _ := c.metalCache()
		metal, err := metalLBPoolsFrom(store.List())
		if err != nil {
			utilruntime.HandleError(err)
		}
		for _, o := range metal {
			parsed = append(parsed, parsedPool{created: o.CreationTimestamp, info: parseMetalLBPool(o)})
		}
	}
	infos := checkOverlaps(parsed)
	var pools []addrpool.Pool
	for _, pi := range infos {
		if pi.valid {
			pools = append(pools, pi.pool)
		}
	}
	restored, e := c.state.setPools(infos, pools)
	c.apply(e)
	if !restored {
		return // Run queues nothing before the restore; the informers' adds queue all.
	}
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range svcs {
		if handles(svc, c.opts.LoadBalancerClass) {
			c.queue.Add(svc.Namespace + "/" + svc.Name)
		}
	}
}

// syncPoolStatus writes a pool's counts and Valid condition when they changed.
func (c *Controller) syncPoolStatus(ctx context.Context, name string) error {
	if isMetalLBPool(name) {
		return c.syncMetalLBPoolStatus(ctx, name)
	}
	if !c.ownAPI {
		return nil
	}
	o, exists, err := c.poolCache().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	cur, err := v1alpha1.FromUnstructured(o.(*unstructured.Unstructured))
	if err != nil {
		return err
	}
	pi, stats := c.state.poolStatus(name)
	if pi == nil {
		return nil
	}
	if !pi.valid {
		stats = addrpool.Stats{}
	}
	desired := cur.DeepCopy()
	desired.Status.ObservedGeneration = cur.Generation
	desired.Status.AssignedIPv4, desired.Status.AvailableIPv4 = stats.AssignedIPv4, stats.AvailableIPv4
	desired.Status.AssignedIPv6, desired.Status.AvailableIPv6 = stats.AssignedIPv6, stats.AvailableIPv6
	status := metav1.ConditionTrue
	if !pi.valid {
		status = metav1.ConditionFalse
	}
	setCondition(&desired.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionValid, Status: status, Reason: pi.reason, Message: pi.message, ObservedGeneration: cur.Generation,
	})
	if poolStatusEqual(cur.Status, desired.Status) {
		return nil
	}
	_, err = c.pools.UpdateStatus(ctx, desired)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) {
		// The cache is behind a write (ours, or another writer's); retried with the
		// queue's backoff (poolRetryMin doubling to poolRetryMax) and dropped after its
		// retry cap: the next allocation change queues the pool again.
		c.metrics.conflicts.WithLabelValues(conflictPoolStatus).Inc()
		return fmt.Errorf("updating pool status: %w", err)
	}
	return err
}

// setCondition sets cond in conds, keeping lastTransitionTime when the status is unchanged.
func setCondition(conds *[]metav1.Condition, cond metav1.Condition) {
	for i := range *conds {
		old := &(*conds)[i]
		if old.Type != cond.Type {
			continue
		}
		if old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
		} else {
			cond.LastTransitionTime = metav1.Now()
		}
		*old = cond
		return
	}
	cond.LastTransitionTime = metav1.Now()
	*conds = append(*conds, cond)
}

func poolStatusEqual(a, b v1alpha1.IPAddressPoolStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.AssignedIPv4 != b.AssignedIPv4 || a.AvailableIPv4 != b.AvailableIPv4 ||
		a.AssignedIPv6 != b.AssignedIPv6 || a.AvailableIPv6 != b.AvailableIPv6 || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message ||
			x.ObservedGeneration != y.ObservedGeneration || !x.LastTransitionTime.Equal(&y.LastTransitionTime) {
			return false
		}
	}
	return true
}

// syncMetalLBPoolStatus writes a MetalLB pool's four counters when they changed, as MetalLB's
// own controller does; an invalid pool counts nothing (MetalLB's would not load it).
func (c *Controller) syncMetalLBPoolStatus(ctx context.Context, key string) error {
	store, writer := c.metalCache()
	if writer == nil {
		return nil
	}
	_, objName := poolLabels(key)
	o, exists, err := store.GetByKey(writer.namespace + "/" + objName)
	if err != nil || !exists {
		return err
	}
	cur, err := asMetalLBPool(o)
	if err != nil {
		return err
	}
	pi, stats := c.state.poolStatus(key)
	if pi == nil {
		return nil
	}
	if !pi.valid {
		stats = addrpool.Stats{}
	}
	desired := cur.DeepCopy()
	desired.Status.AssignedIPv4, desired.Status.AvailableIPv4 = stats.AssignedIPv4, stats.AvailableIPv4
	desired.Status.AssignedIPv6, desired.Status.AvailableIPv6 = stats.AssignedIPv6, stats.AvailableIPv6
	if desired.Status == cur.Status {
		return nil
	}
	err = writer.update(ctx, desired)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) {
		c.metrics.conflicts.WithLabelValues(conflictPoolStatus).Inc()
		return fmt.Errorf("updating MetalLB pool status: %w", err)
	}
	return err
}
