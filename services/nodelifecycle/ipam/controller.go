// Package ipam gives every Node its Pod ranges (spec.podCIDR and spec.podCIDRs): one range
// per configured cluster CIDR, cut to the node mask size, never one in use by another Node
// or inside the Service range. It is kube-controller-manager's node-ipam-controller with the
// range allocator, run inside the nodelifecycle-controller binary.
//
// What it does better than upstream: a Node that finds the cluster out of ranges waits,
// without backoff, until a range is freed, and is then tried at once; a Node whose range
// lies outside the cluster CIDR, or overlaps another Node's, gets an Event and keeps its
// range (upstream fails to start, or retries it forever); a write that fails keeps its
// range reserved for that Node (upstream may free a range a Node got after all); a range
// two Nodes claim stays taken until both are gone; and two allocators running at once
// never hand out one range twice: each range is claimed in shared state (claims.go) before
// it is written, and each write is conditioned on the Node's resourceVersion.
package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/nodelifecycle/cidrset"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
)

const (
	// Name is upstream's name of the node IPAM controller (--controllers, leader migration,
	// the controller label of its reconcile metrics).
	Name = "node-ipam-controller"
	// QueueName is upstream's name of the range allocator's queue.
	QueueName = "cidrallocator_node"
	// ComponentName is upstream's source component of the range allocator's Events.
	ComponentName = "cidrAllocator"
	// workers bound the parallel Node writes while many Nodes register at once.
	workers = 10
)

// Event reasons. CIDRNotAvailable and CIDRAssignmentFailed are upstream's.
const (
	// ReasonCIDRNotAvailable: no free range; the Node waits until one is freed.
	ReasonCIDRNotAvailable = "CIDRNotAvailable"
	// ReasonCIDRAssignmentFailed: writing the Node's ranges failed; it is retried.
	ReasonCIDRAssignmentFailed = "CIDRAssignmentFailed"
	// ReasonCIDROutOfRange: a range the Node has lies (partly) outside every cluster CIDR of
	// its family; it is kept, and what overlaps a cluster CIDR is never handed out.
	ReasonCIDROutOfRange = "CIDROutOfRange"
	// ReasonCIDRConflict: a range the Node has overlaps another Node's range or the Service
	// range. It is kept; it stays taken until every Node holding it is gone.
	ReasonCIDRConflict = "CIDRConflict"
	// ReasonCIDRRangesRunningLow: fewer ranges of a cluster CIDR are free than
	// --node-cidr-free-ranges-warning; one per episode, on the kube-node-lease Namespace.
	ReasonCIDRRangesRunningLow = "CIDRRangesRunningLow"
)

// lowEventObject is what the running-low Event is recorded on. A cluster CIDR has no object
// of its own and the Node that took the last range but one is no better a place (Nodes come
// and go); the node lifecycle controller records its cluster-wide Node Events on the
// kube-node-lease Namespace too, so they are found together:
// `kubectl get events -n default --field-selector involvedObject.name=kube-node-lease`.
var lowEventObject = &v1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: v1.NamespaceNodeLease}

// holding is what one Node object holds.
type holding struct {
	// uid tells a Node from a later one of the same name: what a deleted Node held is
	// never carried over to its successor.
	uid    types.UID
	ranges []netip.Prefix
	// reserved: taken by Allocate for the Node and not yet seen on it (the write failed, or
	// its watch event has not arrived). Otherwise the ranges are the Node's own.
	reserved bool
}

// family is one cluster CIDR's allocation state.
type family struct {
	set   *cidrset.Set
	label string // the clusterCIDR metrics label
	// low: an episode of few free ranges is on and its Event recorded.
	low bool
}

// Controller assigns Pod ranges to Nodes.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	nodes    corelisters.NodeLister
	handlers informer.Handlers
	queue    *worker.Queue[string]
	families []*family
	// lowWarning is Config.FreeRangesWarning.
	lowWarning int
	metrics    *ipamMetrics
	rebuilt    atomic.Bool

	// mu guards held and waiting, and keeps them in step with the sets: every change of a
	// set happens under it.
	mu sync.Mutex
	// held is what each Node holds in the sets, by name. A Node is in held once its ranges
	// are accounted for.
	held map[string]holding
	// waiting are the Nodes that found no free range; a release tries them again.
	waiting map[string]bool
	// claims are the known claims (IPAddresses) by name, this process's and others'.
	claims map[string]claim
	// ownHold names the claims that hold their range in the sets on their own account: no
	// holding of this process (a Node's ranges or a reservation) covers them.
	ownHold map[string]bool
}

// New builds the controller over cfg (at least one Range) and registers its handlers; it
// starts nothing. claims is an IPAddress informer limited to ClaimSelector.
func New(nodes coreinformers.NodeInformer, claims networkinginformers.IPAddressInformer, client kubernetes.Interface, recorder record.EventRecorder, cfg Config, reg prometheus.Registerer) (*Controller, error) {
	if len(cfg.Ranges) == 0 {
		return nil, errors.New("no cluster CIDR to allocate from")
	}
	c := &Controller{
		client:   client,
		recorder: recorder,
		nodes:    nodes.Lister(),
		// A Node never stops needing a range: its retries back off (to 1000 s) but never end,
		// so that updates of a Node with a pending write need not retry it (onUpdate).
		queue:      worker.New(worker.Options[string]{Name: QueueName, Controller: Name, Registerer: reg, MaxRetries: -1}),
		metrics:    newMetrics(reg),
		lowWarning: cfg.FreeRangesWarning,
		held:       map[string]holding{},
		waiting:    map[string]bool{},
		claims:     map[string]claim{},
		ownHold:    map[string]bool{},
	}
	for _, r := range cfg.Ranges {
		set, err := cidrset.New(r.Cluster, r.MaskSize)
		if err != nil {
			return nil, err
		}
		f := &family{set: set, label: set.Cluster().String()}
		c.metrics.max.WithLabelValues(f.label).Set(float64(set.Size()))
		// Every series exists from the start, at 0: rate() and alerts see a first release.
		c.metrics.releases.WithLabelValues(f.label)
		c.metrics.allocations.WithLabelValues(f.label)
		c.metrics.tries.WithLabelValues(f.label)
		// The Service range is held for good: no Node gets a range overlapping it.
		for _, svc := range cfg.Service {
			taken, _ := set.Occupy(svc)
			c.metrics.allocations.WithLabelValues(f.label).Add(float64(taken))
		}
		c.families = append(c.families, f)
	}
	c.observeLocked()
	c.handlers.Add(nodes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: c.onUpdate,
		DeleteFunc: c.enqueue,
	})
	c.handlers.Add(claims.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onClaim,
		UpdateFunc: func(_, cur any) { c.onClaim(cur) },
		DeleteFunc: c.onClaimDelete,
	})
	return c, nil
}

// HasSynced reports whether the Node cache is filled and the ranges of every Node in it are
// accounted for.
func (c *Controller) HasSynced() bool { return c.handlers.HasSynced() && c.rebuilt.Load() }

func (c *Controller) enqueue(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if node, ok := obj.(*v1.Node); ok {
		c.queue.Add(node.Name)
	}
}

// onUpdate enqueues a Node whose ranges changed, or that has none and neither waits for a
// free one (a release tries it again) nor has a write pending (its retry is scheduled, with
// backoff): heartbeats never cause an attempt.
func (c *Controller) onUpdate(old, cur any) {
	o, ok1 := old.(*v1.Node)
	n, ok2 := cur.(*v1.Node)
	if !ok1 || !ok2 {
		return
	}
	if !slices.Equal(podCIDRs(o), podCIDRs(n)) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) {
		c.queue.Add(n.Name)
		return
	}
	if len(podCIDRs(n)) == 0 {
		c.mu.Lock()
		h, held := c.held[n.Name]
		busy := c.waiting[n.Name] || (held && h.uid == n.UID && h.reserved)
		c.mu.Unlock()
		if !busy {
			c.queue.Add(n.Name)
		}
	}
}

// Run waits for the Node cache, accounts for the ranges every Node already has (so that a
// restart or a new leader never hands one out again), then assigns ranges until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	ranges := make([]string, len(c.families))
	for i, f := range c.families {
		ranges[i] = fmt.Sprintf("%s (/%d, %d ranges)", f.label, f.set.MaskSize(), f.set.Size())
	}
	return c.handlers.RunWhenSynced(ctx, "range CIDR allocator", func(ctx context.Context) error {
		if err := c.rebuild(ctx); err != nil {
			return err
		}
		c.queue.Run(ctx, workers, c.sync)
		return nil
	}, "clusterCIDRs", ranges)
}

// rebuild marks the ranges of every cached Node used, before any range is handed out. The
// claims are accounted for already (their handler ran for each before the caches synced):
// those of a Node with that range become part of its holding, the others keep their range
// used until they are released, and those whose Node is unknown here are queued to be
// verified and released.
func (c *Controller) rebuild(ctx context.Context) error {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, node := range nodes {
		if len(podCIDRs(node)) > 0 {
			c.adopt(ctx, node)
		}
	}
	c.rebuilt.Store(true)
	c.mu.Lock()
	c.observeLocked() // the free ranges are known only now
	c.mu.Unlock()
	klog.FromContext(ctx).Info("Accounted for existing Pod ranges", "nodes", len(nodes), "used", c.usage())
	return nil
}

// sync gives the Node its ranges, accounts for ranges it got elsewhere, or releases the
// ranges of a Node that is gone.
func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.release(ctx, name)
		return c.collectClaims(ctx, name, nil)
	}
	if err != nil {
		return err
	}
	c.forgetPredecessor(ctx, node)
	if len(podCIDRs(node)) > 0 {
		c.adopt(ctx, node)
		return c.collectClaims(ctx, name, node)
	}
	if err := c.collectClaims(ctx, name, node); err != nil {
		return err
	}
	if node.DeletionTimestamp != nil {
		c.mu.Lock()
		c.setWaitingLocked(node.Name, false)
		c.mu.Unlock()
		return nil // going away: it needs no range
	}
	for try := 1; ; try++ {
		ranges, err := c.reserve(node)
		if err != nil {
			var full *fullError
			if errors.As(err, &full) {
				return nil // waiting; a release tries again
			}
			return err
		}
		err = c.claimRanges(ctx, node, ranges)
		if errors.Is(err, errTaken) && try < maxClaimTries {
			continue
		}
		if err != nil {
			return err
		}
		return c.write(ctx, node, ranges)
	}
}

// forgetPredecessor releases what an earlier Node of the same name held (deleted and
// registered again before its delete was processed).
func (c *Controller) forgetPredecessor(ctx context.Context, node *v1.Node) {
	c.mu.Lock()
	h, ok := c.held[node.Name]
	c.mu.Unlock()
	if ok && h.uid != node.UID {
		c.release(ctx, node.Name)
	}
}

// fullError: a cluster CIDR has no free range. first: the Node was not waiting before.
type fullError struct {
	cluster string
	size    int
	first   bool
}

func (e *fullError) Error() string { return fmt.Sprintf("no free range in %s", e.cluster) }

// reserve returns the ranges held for node, taking one per family if it holds none. When a
// family is full it takes nothing, marks the Node waiting and, the first time, records an
// Event.
func (c *Controller) reserve(node *v1.Node) ([]netip.Prefix, error) {
	ranges, full := c.take(node)
	if full == nil {
		return ranges, nil
	}
	if full.first {
		c.recorder.Eventf(nodeRef(node), v1.EventTypeWarning, ReasonCIDRNotAvailable,
			"Node %s gets no Pod range: all %d ranges of %s are in use; it gets one as soon as one is freed", node.Name, full.size, full.cluster)
	}
	return nil, full
}

// take is reserve's bookkeeping, under mu.
func (c *Controller) take(node *v1.Node) ([]netip.Prefix, *fullError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name := node.Name
	// What is reserved already (the write did not land or is not seen yet, or a range was
	// lost to another claim) is kept, one range per family, unless another Node registered
	// with a range overlapping it meanwhile. Should an earlier write of a dropped range have
	// landed after all, the apiserver refuses the new one and the Node's real ranges are
	// adopted.
	have := make([]netip.Prefix, len(c.families))
	if h := c.held[name]; h.reserved && h.uid == node.UID {
		var drop []netip.Prefix
		for _, r := range h.ranges {
			i := c.familyIndex(r)
			if i < 0 || have[i].IsValid() || c.sharedLocked([]netip.Prefix{r}) {
				drop = append(drop, r)
				continue
			}
			have[i] = r
		}
		c.dropLocked(name, holding{uid: h.uid, ranges: drop})
		delete(c.held, name)
	}
	// A claim made for this very Node by someone else (an allocator that stopped before
	// writing, or one working on it right now) is taken over rather than a new range.
	for _, cl := range c.claims {
		if cl.node != name || cl.nodeUID != node.UID || !c.ownHold[cl.name] {
			continue
		}
		if i := c.familyIndex(cl.r); i >= 0 && !have[i].IsValid() && c.families[i].set.Contains(cl.r) && !c.sharedLocked([]netip.Prefix{cl.r}) {
			delete(c.ownHold, cl.name)
			have[i] = cl.r
		}
	}
	// All families or none: check before taking anything.
	for i, f := range c.families {
		if !have[i].IsValid() && f.set.Used() == f.set.Size() {
			c.dropLocked(name, holding{uid: node.UID, ranges: slices.DeleteFunc(have, func(p netip.Prefix) bool { return !p.IsValid() })})
			first := !c.waiting[name]
			c.setWaitingLocked(name, true)
			c.observeLocked()
			return nil, &fullError{cluster: f.label, size: f.set.Size(), first: first}
		}
	}
	ranges := make([]netip.Prefix, 0, len(c.families))
	for i, f := range c.families {
		if have[i].IsValid() {
			ranges = append(ranges, have[i])
			continue
		}
		r, tries, err := f.set.Allocate()
		if err != nil { // cannot happen: checked above, under the same lock
			panic(fmt.Sprintf("allocating from %s with %d of %d used: %v", f.label, f.set.Used(), f.set.Size(), err))
		}
		c.metrics.allocations.WithLabelValues(f.label).Inc()
		c.metrics.tries.WithLabelValues(f.label).Observe(float64(tries))
		ranges = append(ranges, r)
	}
	c.held[name] = holding{uid: node.UID, ranges: ranges, reserved: true}
	c.setWaitingLocked(name, false)
	c.observeLocked()
	return ranges, nil
}

// sharedLocked reports whether another holder shares any of ranges.
func (c *Controller) sharedLocked(ranges []netip.Prefix) bool {
	for _, r := range ranges {
		if f := c.familyOf(r); f != nil && f.set.Shared(r) {
			return true
		}
	}
	return false
}

func (c *Controller) setWaitingLocked(name string, waiting bool) {
	if c.waiting[name] == waiting {
		return
	}
	if waiting {
		c.waiting[name] = true
	} else {
		delete(c.waiting, name)
	}
	c.metrics.waiting.Set(float64(len(c.waiting)))
}

// write sets the Node's ranges, claimed for it already. The merge patch carries the Node's
// resourceVersion: it lands only on the version the decision was made on, so it can never
// reach a Node deleted and registered again under the same name meanwhile (the claim names
// the old one). A 409 re-reads the Node: gone or replaced, the ranges are let go; ranges set
// by someone else are adopted; otherwise the write is made again on the latest version, a
// bounded number of times.
func (c *Controller) write(ctx context.Context, node *v1.Node, ranges []netip.Prefix) error {
	logger := klog.FromContext(ctx)
	strs := make([]string, len(ranges))
	for i, r := range ranges {
		strs[i] = r.String()
	}
	var err error
	for try := 1; ; try++ {
		var patch []byte
		patch, err = json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
			"spec":     map[string]any{"podCIDR": strs[0], "podCIDRs": strs},
		})
		if err != nil {
			return err
		}
		_, err = c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil:
			logger.Info("Set Node Pod ranges", "node", klog.KObj(node), "podCIDRs", strs)
			return nil
		case apierrors.IsNotFound(err):
			c.release(ctx, node.Name)
			return c.collectClaims(ctx, node.Name, nil)
		case !apierrors.IsInvalid(err) && !apierrors.IsConflict(err):
			// Keep the reservation: the write may have landed, and the next try writes the
			// same.
			c.recorder.Eventf(nodeRef(node), v1.EventTypeWarning, ReasonCIDRAssignmentFailed, "Setting Pod ranges %v: %v", strs, err)
			return fmt.Errorf("setting Pod ranges %v of Node %s: %w", strs, node.Name, err)
		}
		// Stale, or someone else set the Node's ranges first: look at the Node as it is.
		live, getErr := c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(getErr):
			c.release(ctx, node.Name)
			return c.collectClaims(ctx, node.Name, nil)
		case getErr != nil:
			return fmt.Errorf("reading Node %s after its Pod ranges were refused: %w", node.Name, getErr)
		case live.UID != node.UID:
			// Replaced: what was reserved for the old Node is let go (its claims once
			// verified), the new one is synced on its own event.
			c.release(ctx, node.Name)
			return c.collectClaims(ctx, node.Name, live)
		case len(podCIDRs(live)) > 0:
			c.adopt(ctx, live)
			return c.collectClaims(ctx, node.Name, live)
		case try >= maxPatchTries:
			return fmt.Errorf("setting Pod ranges %v of Node %s: still stale after %d tries: %w", strs, node.Name, try, err)
		}
		logger.V(2).Info("Node changed under the write of its Pod ranges, writing again", "node", klog.KObj(node), "resourceVersion", live.ResourceVersion)
		node = live
	}
}

// adopt accounts for the ranges a Node has: it frees what was reserved for it if that is not
// what it has, and holds what it has. A range outside the cluster CIDRs or shared with
// another holder gets an Event; it is never rewritten.
func (c *Controller) adopt(ctx context.Context, node *v1.Node) {
	logger := klog.FromContext(ctx)
	ranges := parseRanges(logger, node)
	c.mu.Lock()
	prev, known := c.held[node.Name]
	if known && prev.uid == node.UID && slices.Equal(prev.ranges, ranges) {
		// Accounted for already; a reservation now seen on the Node becomes its own.
		c.held[node.Name] = holding{uid: node.UID, ranges: ranges}
		c.mu.Unlock()
		return
	}
	freed := c.dropLocked(node.Name, prev)
	var outside, shared []string
	for _, r := range ranges {
		f := c.familyOf(r)
		if f == nil {
			outside = append(outside, r.String())
			continue
		}
		if !f.set.Contains(r) {
			outside = append(outside, r.String())
		}
		if c.occupyLocked(node.Name, node.UID, r) {
			shared = append(shared, r.String())
		}
	}
	c.held[node.Name] = holding{uid: node.UID, ranges: ranges}
	c.setWaitingLocked(node.Name, false)
	c.observeLocked()
	wake := c.wakeLocked(freed)
	c.mu.Unlock()

	if len(outside) > 0 {
		c.recorder.Eventf(nodeRef(node), v1.EventTypeWarning, ReasonCIDROutOfRange,
			"Node %s has Pod range(s) %v outside the cluster CIDR(s) %v; kept as they are, and never handed to another Node", node.Name, outside, c.clusterLabels())
	}
	if len(shared) > 0 {
		c.recorder.Eventf(nodeRef(node), v1.EventTypeWarning, ReasonCIDRConflict,
			"Node %s has Pod range(s) %v overlapping another Node's range or the Service range; kept, and held until every Node using them is gone", node.Name, shared)
	}
	c.requeue(wake)
}

// release frees the ranges of a Node that is gone, and tries the waiting Nodes again.
func (c *Controller) release(ctx context.Context, name string) {
	c.mu.Lock()
	h, ok := c.held[name]
	c.setWaitingLocked(name, false)
	if !ok {
		c.mu.Unlock()
		return
	}
	ranges := h.ranges
	delete(c.held, name)
	freed := c.dropLocked(name, h)
	c.observeLocked()
	wake := c.wakeLocked(freed)
	c.mu.Unlock()
	if len(ranges) > 0 {
		klog.FromContext(ctx).Info("Released the Pod ranges of a deleted Node", "node", name, "podCIDRs", ranges, "waitingNodes", len(wake))
	}
	c.requeue(wake)
}

func (c *Controller) releaseLocked(ranges []netip.Prefix) (freed int) {
	for _, r := range ranges {
		if f := c.familyOf(r); f != nil {
			n := f.set.Release(r)
			c.metrics.releases.WithLabelValues(f.label).Add(float64(n))
			freed += n
		}
	}
	return freed
}

// wakeLocked lists the waiting Nodes when ranges were freed.
func (c *Controller) wakeLocked(freed int) []string {
	if freed == 0 || len(c.waiting) == 0 {
		return nil
	}
	out := make([]string, 0, len(c.waiting))
	for name := range c.waiting {
		out = append(out, name)
	}
	return out
}

func (c *Controller) requeue(names []string) {
	for _, n := range names {
		c.queue.Add(n)
	}
}

func (c *Controller) familyOf(r netip.Prefix) *family {
	if i := c.familyIndex(r); i >= 0 {
		return c.families[i]
	}
	return nil
}

func (c *Controller) familyIndex(r netip.Prefix) int {
	for i, f := range c.families {
		if f.set.Cluster().Addr().BitLen() == r.Addr().BitLen() {
			return i
		}
	}
	return -1
}

func (c *Controller) clusterLabels() []string {
	out := make([]string, len(c.families))
	for i, f := range c.families {
		out[i] = f.label
	}
	return out
}

// usage is "used/size" per cluster CIDR, for logs.
func (c *Controller) usage() []string {
	out := make([]string, len(c.families))
	for i, f := range c.families {
		out[i] = fmt.Sprintf("%s %d/%d", f.label, f.set.Used(), f.set.Size())
	}
	return out
}

func (c *Controller) observeLocked() {
	for _, f := range c.families {
		free := f.set.Size() - f.set.Used()
		c.metrics.usage.WithLabelValues(f.label).Set(float64(f.set.Used()) / float64(f.set.Size()))
		c.metrics.free.WithLabelValues(f.label).Set(float64(free))
		c.warnLowLocked(f, free)
	}
}

// warnLowLocked records one Event when a cluster CIDR's free ranges fall below the warning
// threshold. Upstream says nothing until a Node finds none (CIDRNotAvailable), when the
// Node already waits. The episode ends only once twice the threshold is free again, so
// Nodes coming and going at the threshold do not repeat the Event.
func (c *Controller) warnLowLocked(f *family, free int) {
	if c.lowWarning <= 0 || !c.rebuilt.Load() {
		// Before rebuild the sets do not hold the Nodes' ranges yet: no verdict.
		return
	}
	switch {
	case !f.low && free < c.lowWarning:
		f.low = true
		c.recorder.Eventf(lowEventObject, v1.EventTypeWarning, ReasonCIDRRangesRunningLow,
			"Only %d of the %d Pod ranges (/%d) of cluster CIDR %s are free (fewer than --%s=%d): once none is, new Nodes wait for one (CIDRNotAvailable)",
			free, f.set.Size(), f.set.MaskSize(), f.label, FlagCIDRFreeRangesWarning, c.lowWarning)
	case f.low && free >= 2*c.lowWarning:
		f.low = false
	}
}

// podCIDRs is the Node's ranges as written: spec.podCIDRs, or the legacy single field.
func podCIDRs(node *v1.Node) []string {
	if len(node.Spec.PodCIDRs) > 0 {
		return node.Spec.PodCIDRs
	}
	if node.Spec.PodCIDR != "" {
		return []string{node.Spec.PodCIDR}
	}
	return nil
}

// parseRanges parses the Node's ranges. The apiserver validates them, so a bad one is only
// logged and skipped.
func parseRanges(logger klog.Logger, node *v1.Node) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range podCIDRs(node) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			logger.Error(err, "Skipping a Pod range that does not parse", "node", klog.KObj(node), "podCIDR", s)
			continue
		}
		out = append(out, p.Masked())
	}
	return out
}

func nodeRef(node *v1.Node) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
}
