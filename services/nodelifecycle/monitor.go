package nodelifecycle

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// runMonitor checks every Node in rounds: every --node-monitor-period, at the next Node
// deadline (so a silent Node is detected right when its grace period ends, not up to a
// period later), and soon after a Node's Ready condition changes. Rounds never overlap and
// are at least minRoundSpacing apart.
func (c *Controller) runMonitor(ctx context.Context) {
	for {
		start := c.now()
		next := c.checkAllNodes(ctx)
		wake := start.Add(c.opts.MonitorPeriod)
		if !next.IsZero() && next.Add(deadlineSlack).Before(wake) {
			wake = next.Add(deadlineSlack)
		}
		earliest := start.Add(minRoundSpacing)
		if wake.Before(earliest) {
			wake = earliest
		}
		timer := time.NewTimer(wake.Sub(c.now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-c.checkRequested:
			timer.Stop()
			if d := earliest.Sub(c.now()); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
	}
}

// nodeResult is what one Node contributes to a round of checks.
type nodeResult struct {
	ok       bool
	zone     string
	excluded bool
	ready    v1.ConditionStatus // "" when the Node has no Ready condition yet
	// deadline is when the Node's grace period ends, zero when it is Unknown already.
	deadline time.Time
	// node is the Node as last read or written.
	node *v1.Node
	// wantTaint: the Node should get a NoExecute taint through its zone's queue.
	wantTaint bool
}

// checkAllNodes is one round: it checks every Node once and returns the earliest deadline
// of a Node still counted as alive, or of the partition guard (zero if none).
func (c *Controller) checkAllNodes(ctx context.Context) time.Time {
	start := time.Now()
	defer func() { c.metrics.allHealthDur.Observe(time.Since(start).Seconds()) }()
	logger := klog.FromContext(ctx)

	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing nodes from the cache")
		return time.Time{}
	}
	c.track(ctx, nodes)

	results := make([]nodeResult, len(nodes))
	workqueue.ParallelizeUntil(ctx, healthWorkers, len(nodes), func(i int) {
		results[i] = c.checkNode(ctx, nodes[i])
	})
	if ctx.Err() != nil {
		// Stopping: the round is incomplete, and zone states computed from part of the
		// Nodes could look like a disruption that is not there.
		return time.Time{}
	}

	// Whether the Nodes that fell silent did so together is known only once every Node's
	// health is updated: Pods and taints follow the verdict, in a second pass.
	next := c.judgePartition(ctx, len(nodes), results)
	workqueue.ParallelizeUntil(ctx, healthWorkers, len(nodes), func(i int) {
		if r := &results[i]; r.ok && r.ready != "" {
			r.wantTaint = c.actOnReady(ctx, r)
		}
	})
	if ctx.Err() != nil {
		return time.Time{}
	}

	counts, next := countZones(results, next)
	c.handleDisruption(ctx, counts, nodes)
	next = c.queueNoExecute(nodes, results, next)
	// Always: the rates may have changed too.
	c.wakeTainter()
	c.wakeState()
	return next
}

// countZones counts each zone's Ready and not-Ready Nodes among results, and returns next or
// the earliest deadline of a result, whichever comes first. A Node whose health update failed
// does not vote, nor does one excluded from disruption.
func countZones(results []nodeResult, next time.Time) (map[string]*zoneCount, time.Time) {
	counts := map[string]*zoneCount{}
	for i := range results {
		r := &results[i]
		if !r.ok {
			continue // the health update failed: this Node does not vote this time
		}
		if !r.excluded {
			zc := counts[r.zone]
			if zc == nil {
				zc = &zoneCount{}
				counts[r.zone] = zc
			}
			if r.ready == v1.ConditionTrue {
				zc.ready++
			} else {
				zc.notReady++
			}
		}
		if !r.deadline.IsZero() && (next.IsZero() || r.deadline.Before(next)) {
			next = r.deadline
		}
	}
	return counts, next
}

// queueNoExecute queues the NoExecute taints of the round's results that want one, and
// returns next or the earliest deadline of a Node whose taint must wait, whichever comes
// first. It runs only once the zone states (and so the rates) account for this round: a Node
// never gets tainted at the rate of a zone state that its own failure is about to change.
func (c *Controller) queueNoExecute(nodes []*v1.Node, results []nodeResult, next time.Time) time.Time {
	for i := range results {
		r := &results[i]
		if !r.ok || !r.wantTaint {
			continue
		}
		z := c.zone(r.zone)
		if z == nil {
			continue
		}
		if r.ready == v1.ConditionUnknown {
			// The unreachable taint needs a full grace period of silence heard by this
			// process: not the case right after all zones were down (grace restarted just
			// now) or for a Node a previous leader marked Unknown but did not taint.
			h, _ := c.health.get(nodes[i].Name)
			if d := c.opts.deadline(h); !c.now().After(d) {
				z.tainter.remove(nodes[i].Name)
				if next.IsZero() || d.Before(next) {
					next = d
				}
				continue
			}
		}
		z.tainter.add(nodes[i].Name, c.now())
	}
	return next
}

type zoneCount struct{ ready, notReady int }

// track notices Nodes added and removed since the last round and creates zones.
func (c *Controller) track(ctx context.Context, nodes []*v1.Node) {
	seen := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		seen[n.Name] = true
		c.ensureZone(ctx, zoneKey(n))
		if c.known[n.Name] {
			continue
		}
		c.known[n.Name] = true
		// Every Node this term of leadership starts tracking, those present at start
		// included, as upstream (the event recorder aggregates a large cluster's burst).
		c.nodeEvent(n.Name, n.UID, ReasonRegisteredNode, fmt.Sprintf("Registered Node %s in Controller", n.Name))
	}
	for name := range c.known {
		if !seen[name] {
			delete(c.known, name)
			c.nodeEvent(name, "", ReasonRemovingNode, fmt.Sprintf("Removing Node %s from Controller", name))
			c.forgetNode(name)
		}
	}
}

func (c *Controller) nodeEvent(name string, uid types.UID, reason, message string) {
	ref := &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: uid}
	c.recorder.Eventf(ref, v1.EventTypeNormal, reason, "Node %s event: %s", name, message)
}

// forgetNode drops a deleted Node from every zone queue.
func (c *Controller) forgetNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, z := range c.zones {
		z.tainter.remove(name)
	}
	c.partition.forget(name)
}

func (c *Controller) ensureZone(ctx context.Context, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.zones[key]; ok {
		return
	}
	r := c.opts.EvictionRate
	if c.allDown {
		// A zone appearing while every zone is down must not taint either.
		r = 0
	}
	t := newZoneTainter(r, c.opts.MonitorPeriod)
	if at, ok := c.inherited[key]; ok {
		t.inherit(at)
	} else if !c.inheritAll.IsZero() {
		t.inherit(c.inheritAll)
	}
	c.zones[key] = &zone{state: StateInitial, tainter: t}
	c.metrics.evictions.WithLabelValues(key).Add(0)
	c.metrics.zoneRate.WithLabelValues(key).Set(r)
	klog.FromContext(ctx).Info("Initializing zone", "zone", zoneName(key))
}

func (c *Controller) zone(key string) *zone {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.zones[key]
}

// checkNode updates one Node's health and acts on its Ready state.
func (c *Controller) checkNode(ctx context.Context, node *v1.Node) nodeResult {
	start := time.Now()
	defer func() { c.metrics.nodeHealthDur.Observe(time.Since(start).Seconds()) }()
	logger := klog.FromContext(ctx).WithValues("node", node.Name)

	r := nodeResult{zone: zoneKey(node), excluded: excludedFromDisruption(node)}
	observed, current, deadline, written, err := c.updateHealth(ctx, node)
	if err != nil {
		logger.Error(err, "Updating node health; this node takes no part in zone states this time")
		return r
	}
	if written != nil {
		node = written
	}
	r.ok, r.deadline, r.node = true, deadline, node
	if current == nil {
		return r
	}
	r.ready = current.Status
	if current.Status == v1.ConditionUnknown && observed == v1.ConditionTrue {
		logger.Info("Node stopped reporting: marked Unknown")
		c.recorder.Eventf(&v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
			v1.EventTypeNormal, ReasonNodeNotReady, "Node %s status is now: %s", node.Name, ReasonNodeNotReady)
	}
	return r
}

// actOnReady brings a checked Node's NoExecute taints and its Pods' readiness in line with
// its Ready status, unless the partition guard holds it. It reports whether the Node needs
// a NoExecute taint through its zone's queue.
func (c *Controller) actOnReady(ctx context.Context, r *nodeResult) bool {
	node := r.node
	if r.ready == v1.ConditionUnknown && c.partition.holds(node.Name) {
		// Nothing for its silence, not even a NoExecute swap: the Node stays as it was.
		if z := c.zone(r.zone); z != nil {
			z.tainter.remove(node.Name)
		}
		return false
	}
	want := c.noExecute(ctx, node, r.ready)
	if r.ready != v1.ConditionUnknown {
		return want
	}
	// Every round, not only on the transition: a Pod that a previous leader did not get
	// to, or whose write failed, is marked now. Pods already not Ready cost no write.
	if err := c.markPodsNotReady(ctx, node.Name); err != nil {
		klog.FromContext(ctx).Error(err, "Marking pods not ready; will retry next round", "node", node.Name)
	}
	return want
}

// judgePartition gives the partition guard this round's silent Nodes and acts on its
// verdict: the Event and gauge of an episode, a taint sync for each Node released. It
// returns when the guard must look again (zero if nothing is due).
func (c *Controller) judgePartition(ctx context.Context, total int, results []nodeResult) time.Time {
	if !c.partition.enabled() {
		return time.Time{}
	}
	obs := make([]silence, 0, len(results))
	for i := range results {
		r := &results[i]
		if !r.ok {
			continue // not checked this time: its standing is unchanged
		}
		h, _ := c.health.get(r.node.Name)
		unknown := r.ready == v1.ConditionUnknown
		obs = append(obs, silence{name: r.node.Name, unknown: unknown, silent: unknown && r.deadline.IsZero(), signs: h.signs})
	}
	v := c.partition.judge(c.now(), total, obs)
	logger := klog.FromContext(ctx)
	switch {
	case v.started:
		c.metrics.partition.Set(1)
		logger.Info("Many nodes fell silent together: suspecting this controller's own partition from them; their pods stay Ready and they get no taints until they return",
			"heldNodes", v.held, "nodes", total, "fraction", c.opts.PartitionUnknownFraction)
		c.recorder.Eventf(zoneEventObject, v1.EventTypeWarning, ReasonPartitionSuspected,
			"%d of %d Nodes fell silent within %s of one another (more than --%s=%g of them): taken for this controller's partition from the Nodes, not for dead Nodes. Their Pods are not marked not Ready and they get no taints; each is handled as usual again once its Lease or status is renewed, and those still silent a grace period (%s) after the first one returned are handled as silent Nodes",
			v.held, total, c.partition.window, FlagPartitionUnknownFraction, c.opts.PartitionUnknownFraction, c.opts.MonitorGracePeriod)
	case v.ended:
		c.metrics.partition.Set(0)
		logger.Info("Suspected partition over: no node is held any more")
	}
	for _, name := range v.released {
		logger.V(2).Info("Silent node no longer held by the partition guard: handled as a silent node", "node", name)
		// Its condition taints were left alone while held.
		c.nodeQueue.Add(name)
	}
	for _, name := range v.resync {
		c.nodeQueue.Add(name)
	}
	return v.next
}
