// The event handlers: thin, they record signs of life and ask for work (a queued Node, a round
// of checks soon); the work itself is the monitor's and the queues'.

package nodelifecycle

import (
	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
)

func (c *Controller) onNodeAdd(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	c.health.observeNode(node)
	c.nodeQueue.Add(node.Name)
	c.requestCheck()
}

func (c *Controller) onNodeUpdate(old, cur any) {
	o, ok1 := old.(*v1.Node)
	n, ok2 := cur.(*v1.Node)
	if !ok1 || !ok2 {
		return
	}
	c.health.observeNode(n)
	if o.Spec.Unschedulable != n.Spec.Unschedulable ||
		!equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
		!equality.Semantic.DeepEqual(desiredNoScheduleKeys(o), desiredNoScheduleKeys(n)) ||
		betaLabelsToSet(n) != nil {
		c.nodeQueue.Add(n.Name)
	}
	// A Ready change made by someone else (a kubelet reporting NotReady, or Ready again
	// after an outage) is acted on now, not at the next period: Pods, taints and zone
	// states follow at once.
	if readyStatus(o) != readyStatus(n) || zoneKey(o) != zoneKey(n) {
		c.requestCheck()
	}
}

func (c *Controller) onNodeDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if node, ok := obj.(*v1.Node); ok {
		c.health.forget(node.Name)
		c.requestCheck()
	}
}

func (c *Controller) onLease(obj any) {
	if lease, ok := obj.(*coordv1.Lease); ok {
		c.health.observeLease(lease)
	}
}

// readyStatus is node's Ready condition status, "" when it has none.
func readyStatus(node *v1.Node) v1.ConditionStatus {
	if r := nodeReadyCondition(&node.Status); r != nil {
		return r.Status
	}
	return ""
}

// requestCheck asks the monitor for a round of checks soon without blocking.
func (c *Controller) requestCheck() {
	select {
	case c.checkRequested <- struct{}{}:
	default:
	}
}

// wakeTainter asks the NoExecute tainter to look at its queues again without blocking.
func (c *Controller) wakeTainter() {
	select {
	case c.tainterWake <- struct{}{}:
	default:
	}
}
