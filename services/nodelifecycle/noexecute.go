// NoExecute taints: which one a Node that is not Ready gets, and the tainter that applies
// them at each zone's rate.

package nodelifecycle

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// noExecute acts on a Node's NoExecute taint for its Ready status: swaps not-ready and
// unreachable at once when the status flips, removes both when Ready. It reports whether
// the Node needs a new taint through its zone's rate limiter.
func (c *Controller) noExecute(ctx context.Context, node *v1.Node, status v1.ConditionStatus) bool {
	logger := klog.FromContext(ctx).WithValues("node", node.Name)
	var want, other v1.Taint
	switch status {
	case v1.ConditionFalse:
		want, other = notReadyTaint, unreachableTaint
	case v1.ConditionUnknown:
		want, other = unreachableTaint, notReadyTaint
	default:
		if err := c.markReachable(ctx, node); err != nil {
			logger.Error(err, "Removing NoExecute taints from a Ready node; will retry next round")
		}
		return false
	}
	switch {
	case hasTaint(node.Spec.Taints, want):
		if z := c.zone(zoneKey(node)); z != nil {
			z.tainter.remove(node.Name)
		}
		return false
	case hasTaint(node.Spec.Taints, other):
		// Tainted already: the eviction decision was made, only its reason changed.
		_, err := c.setTaints(ctx, node, func(n *v1.Node) ([]v1.Taint, bool) {
			return swapTaints(n.Spec.Taints, &want, []v1.Taint{other}, c.now())
		})
		if err != nil {
			logger.Error(err, "Swapping NoExecute taints; will retry next round")
		}
		return false
	}
	return true
}

// markReachable removes this controller's NoExecute taints from node and drops it from its
// zone's queue.
func (c *Controller) markReachable(ctx context.Context, node *v1.Node) error {
	if z := c.zone(zoneKey(node)); z != nil {
		z.tainter.remove(node.Name)
	}
	if !hasTaint(node.Spec.Taints, unreachableTaint) && !hasTaint(node.Spec.Taints, notReadyTaint) {
		return nil
	}
	_, err := c.setTaints(ctx, node, func(n *v1.Node) ([]v1.Taint, bool) {
		return swapTaints(n.Spec.Taints, nil, []v1.Taint{unreachableTaint, notReadyTaint}, c.now())
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// runTainter applies queued NoExecute taints as each zone's rate allows. It sleeps while
// no zone has work it may do.
func (c *Controller) runTainter(ctx context.Context) {
	for {
		busy := false
		c.mu.Lock()
		zones := make(map[string]*zoneTainter, len(c.zones))
		for k, z := range c.zones {
			zones[k] = z.tainter
		}
		c.mu.Unlock()
		for k, t := range zones {
			for {
				name, ok := t.next(c.now())
				if !ok {
					break
				}
				c.applyNoExecute(ctx, k, t, name)
			}
			if t.pending() > 0 && t.Rate() > 0 {
				busy = true
			}
		}
		var tick <-chan time.Time
		if busy {
			tick = time.After(taintRetryPeriod)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-c.tainterWake:
		}
	}
}

// applyNoExecute gives one Node the NoExecute taint matching its Ready status now.
func (c *Controller) applyNoExecute(ctx context.Context, zoneKey string, t *zoneTainter, name string) {
	logger := klog.FromContext(ctx).WithValues("node", name, "zone", zoneName(zoneKey))
	node, err := c.nodes.Get(name)
	if err != nil {
		return // deleted meanwhile
	}
	written, err := c.setTaints(ctx, node, func(n *v1.Node) ([]v1.Taint, bool) {
		var want, other v1.Taint
		switch readyStatus(n) {
		case v1.ConditionFalse:
			want, other = notReadyTaint, unreachableTaint
		case v1.ConditionUnknown:
			want, other = unreachableTaint, notReadyTaint
		default:
			return nil, false // Ready again, or never reported: nothing to do
		}
		return swapTaints(n.Spec.Taints, &want, []v1.Taint{other}, c.now())
	})
	if err != nil {
		logger.Error(err, "Adding a NoExecute taint; will retry")
		t.retry(name, c.now())
		return
	}
	if written != nil {
		c.metrics.evictions.WithLabelValues(zoneKey).Inc()
		logger.Info("Node tainted NoExecute", "taints", len(written.Spec.Taints))
		c.wakeState()
	}
}
