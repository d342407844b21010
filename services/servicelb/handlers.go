package servicelb

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Event handlers stay thin: filter, map to keys, queue.

func (c *Controller) enqueueService(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleErrorWithContext(context.Background(), err, "Cannot get key of object", "object", obj)
		return
	}
	c.queue.Add(key)
}

// onServiceUpdate queues a Service when something allocation or cleanup depends on changed.
// A resync (same version) is queued too: it costs no write, and it brings back a key the
// queue dropped after too many retries.
func (c *Controller) onServiceUpdate(oldObj, newObj any) {
	old, okOld := oldObj.(*v1.Service)
	cur, okCur := newObj.(*v1.Service)
	if !okOld || !okCur {
		return
	}
	if old.ResourceVersion != cur.ResourceVersion && !relevantChange(old, cur) {
		return
	}
	c.enqueueService(cur)
}

// relevantChange reports whether an update can change what this controller does.
func relevantChange(old, cur *v1.Service) bool {
	return old.Spec.Type != cur.Spec.Type ||
		!reflect.DeepEqual(old.Spec.LoadBalancerClass, cur.Spec.LoadBalancerClass) ||
		!reflect.DeepEqual(old.DeletionTimestamp, cur.DeletionTimestamp) ||
		!slices.Equal(old.Finalizers, cur.Finalizers) ||
		!maps.Equal(old.Annotations, cur.Annotations) ||
		!maps.Equal(old.Labels, cur.Labels) ||
		!reflect.DeepEqual(old.Spec.Ports, cur.Spec.Ports) ||
		!maps.Equal(old.Spec.Selector, cur.Spec.Selector) ||
		old.Spec.ExternalTrafficPolicy != cur.Spec.ExternalTrafficPolicy ||
		old.Spec.LoadBalancerIP != cur.Spec.LoadBalancerIP ||
		!slices.Equal(old.Spec.IPFamilies, cur.Spec.IPFamilies) ||
		!reflect.DeepEqual(old.Spec.IPFamilyPolicy, cur.Spec.IPFamilyPolicy) ||
		// Someone else wrote the status: put ours back.
		!reflect.DeepEqual(old.Status.LoadBalancer, cur.Status.LoadBalancer)
}

// onNamespaceUpdate retries waiting Services when a namespace's labels change: a pool's
// namespace selector may admit them now.
func (c *Controller) onNamespaceUpdate(oldObj, newObj any) {
	old, okOld := oldObj.(*v1.Namespace)
	cur, okCur := newObj.(*v1.Namespace)
	if !okOld || !okCur || maps.Equal(old.Labels, cur.Labels) {
		return
	}
	c.apply(c.state.WaitingRetry())
}

// ---- nodes ----

// nodeSetKey is the one key of the node queue: any relevant node change recomputes the set.
const nodeSetKey = "nodes"

// excludeLabel is upstream's node label that takes a node out of load balancing.
const excludeLabel = v1.LabelNodeExcludeBalancers

// toBeDeletedTaint is the cluster autoscaler's taint on a node it is about to remove.
const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

func (c *Controller) onNodeUpdate(oldObj, newObj any) {
	old, okOld := oldObj.(*v1.Node)
	cur, okCur := newObj.(*v1.Node)
	if !okOld || !okCur {
		return
	}
	if eligibleNode(old) != eligibleNode(cur) {
		c.nodeQueue.Add(nodeSetKey)
	}
}

// eligibleNode is upstream's stable node set predicate: not being deleted, not excluded by
// label, not about to be removed by the autoscaler. Readiness is deliberately not part of
// it, so a flapping node does not churn every load balancer.
func eligibleNode(n *v1.Node) bool {
	if n.DeletionTimestamp != nil {
		return false
	}
	if v, ok := n.Labels[excludeLabel]; ok {
		// Upstream: any value that is not a false boolean excludes.
		b, err := strconv.ParseBool(v)
		if err != nil || b {
			return false
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == toBeDeletedTaint {
			return false
		}
	}
	return true
}

// syncNodes recomputes the eligible node set. Addresses do not depend on nodes (no cloud
// load balancer to reprogram), so a change is logged and counted, and every Service this
// controller balances is told, as upstream's service controller tells them after updating
// their load balancers' hosts.
func (c *Controller) syncNodes(ctx context.Context, _ string) error {
	start := time.Now()
	defer func() { c.metrics.nodeSyncTime.Observe(time.Since(start).Seconds()) }()
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		c.metrics.nodeSyncError.Inc()
		return fmt.Errorf("listing nodes: %w", err)
	}
	var names []string
	for _, n := range all {
		if eligibleNode(n) {
			names = append(names, n.Name)
		}
	}
	slices.Sort(names)
	var before []string
	if prev := c.nodeSet.Swap(&names); prev != nil {
		before = *prev
	}
	c.metrics.nodes.Set(float64(len(names)))
	if !slices.Equal(before, names) {
		klog.FromContext(ctx).V(2).Info("Eligible node set changed", "nodes", len(names), "before", len(before))
		// The first set of a term is no change of hosts for anyone.
		if before != nil {
			c.hostsChanged(len(names))
		}
	}
	return nil
}

// hostsChanged tells every Service this controller balances (it carries the cleanup
// finalizer) that its load balancer's hosts were updated, or that none is left: upstream's
// UpdatedLoadBalancer and UnAvailableLoadBalancer, one per Service per change.
func (c *Controller) hostsChanged(hosts int) {
	all, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range all {
		if !handles(svc, c.opts.LoadBalancerClass) || !hasFinalizer(svc) || svc.DeletionTimestamp != nil {
			continue
		}
		start := time.Now()
		c.metrics.lbSync.Inc()
		if hosts == 0 {
			c.recorder.Event(svc, v1.EventTypeWarning, ReasonUnavailable, "There are no available nodes for LoadBalancer")
		} else {
			c.recorder.Event(svc, v1.EventTypeNormal, ReasonUpdated, "Updated load balancer with new hosts")
		}
		c.metrics.hostUpdate.Observe(time.Since(start).Seconds())
	}
}

// lastNodeSet is the eligible node set of the last node sync, or nil.
func (c *Controller) lastNodeSet() []string {
	if p := c.nodeSet.Load(); p != nil {
		return *p
	}
	return nil
}

// nodeCount is the size of the last eligible node set, or of the current one before the
// first node sync ran.
func (c *Controller) nodeCount() int {
	if n := c.lastNodeSet(); n != nil {
		return len(n)
	}
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return 0
	}
	count := 0
	for _, node := range all {
		if eligibleNode(node) {
			count++
		}
	}
	return count
}
