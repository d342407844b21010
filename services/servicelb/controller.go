// Package servicelb is kube-controller-manager's service (load balancer) controller as a
// service of its own, with its own address allocation: LoadBalancer Services of its class
// get addresses from IPAddressPools (lb.kcm-split.io/v1alpha1), with upstream's contract
// (finalizer, status.loadBalancer.ingress with ipMode, Events, node set, backoff, metrics).
package servicelb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/services/servicelb/ipam"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// Event reasons: upstream's service controller's, then this controller's own allocation ones
// (MetalLB's names where it has one).
const (
	ReasonEnsuring          = "EnsuringLoadBalancer"
	ReasonEnsured           = "EnsuredLoadBalancer"
	ReasonDeleting          = "DeletingLoadBalancer"
	ReasonDeleted           = "DeletedLoadBalancer"
	ReasonSyncFailed        = "SyncLoadBalancerFailed"
	ReasonUnavailable       = "UnAvailableLoadBalancer"
	ReasonAllocationFailed  = "AllocationFailed"
	ReasonAddressReassigned = "AddressReassigned"
)

// Controller assigns pool addresses to LoadBalancer Services.
type Controller struct {
	client   kubernetes.Interface
	pools    *v1alpha1.Client
	recorder record.EventRecorder
	opts     Options
	metrics  *controllerMetrics

	services   corelisters.ServiceLister
	nodes      corelisters.NodeLister
	namespaces corelisters.NamespaceLister
	// poolStore is the IPAddressPool cache; it starts empty when the CRD is not installed
	// yet and is replaced once it is (SetPoolInformer).
	storeMu   sync.Mutex
	poolStore cache.Store
	// handlers are the event-handler registrations; Run returns their failure, if any.
	handlers informer.Handlers

	queue     *worker.Queue[string]
	stale     *staleTracker
	nodeQueue *worker.Queue[string]
	poolQueue *worker.Queue[string]

	// mu guards everything below: allocation decisions are made one at a time, whatever
	// the number of workers; the API writes that follow are not under it.
	mu        sync.Mutex
	alloc     *ipam.Allocator
	poolInfo  map[string]*poolInfo
	pending   map[string]bool   // Services waiting for an address
	badInput  map[string]string // last invalid request reported per Service, to report it once
	restored  bool              // allocation state rebuilt from Service status
	nodeNames []string          // last eligible node set, sorted
}

// New builds the controller and registers its event handlers; it starts nothing. pools is
// the IPAddressPool informer (unstructured objects), or nil while the CRD is not installed
// (see SetPoolInformer); poolClient writes their status.
func New(
	services coreinformers.ServiceInformer,
	nodes coreinformers.NodeInformer,
	namespaces coreinformers.NamespaceInformer,
	pools cache.SharedIndexInformer,
	client kubernetes.Interface,
	poolClient *v1alpha1.Client,
	recorder record.EventRecorder,
	opts Options,
	reg prometheus.Registerer,
) *Controller {
	c := &Controller{
		client:     client,
		pools:      poolClient,
		recorder:   recorder,
		opts:       opts,
		metrics:    newMetrics(reg),
		services:   services.Lister(),
		nodes:      nodes.Lister(),
		namespaces: namespaces.Lister(),
		poolStore:  cache.NewStore(cache.MetaNamespaceKeyFunc),
		queue: worker.New(worker.Options[string]{
			Name:        QueueName,
			Controller:  ControllerID,
			Registerer:  reg,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.MinRetryDelay, opts.MaxRetryDelay),
		}),
		nodeQueue: worker.New(worker.Options[string]{
			Name:        NodeQueueName,
			Controller:  ControllerID,
			Registerer:  reg,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.MinRetryDelay, opts.MaxRetryDelay),
		}),
		poolQueue: worker.New(worker.Options[string]{
			Name:       PoolQueueName,
			Controller: ControllerID,
			Registerer: reg,
		}),
		stale:    newStaleTracker(),
		alloc:    ipam.New(),
		poolInfo: map[string]*poolInfo{},
		pending:  map[string]bool{},
		badInput: map[string]string{},
	}
	c.handlers.Add(services.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueService,
		UpdateFunc: c.onServiceUpdate,
		DeleteFunc: c.enqueueService,
	})
	c.handlers.Add(nodes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.nodeQueue.Add(nodeSetKey) },
		UpdateFunc: c.onNodeUpdate,
		DeleteFunc: func(any) { c.nodeQueue.Add(nodeSetKey) },
	})
	c.handlers.Add(namespaces.Informer(), cache.ResourceEventHandlerFuncs{
		UpdateFunc: c.onNamespaceUpdate,
	})
	if pools != nil {
		c.handlers.Track(pools.HasSynced, c.addPoolHandlers(pools))
	}
	return c
}

func (c *Controller) addPoolHandlers(pools cache.SharedIndexInformer) error {
	_, err := pools.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.refreshPools() },
		UpdateFunc: c.onPoolUpdate,
		DeleteFunc: func(any) { c.refreshPools() },
	})
	if err != nil {
		return err
	}
	c.storeMu.Lock()
	c.poolStore = pools.GetStore()
	c.storeMu.Unlock()
	return nil
}

// SetPoolInformer hands the controller an IPAddressPool informer once the CRD has been
// installed after the controller started; the caller starts the informer after this call.
// Until then the controller runs without pools: Services wait for addresses, and those
// being deleted or changing type are still cleaned up.
func (c *Controller) SetPoolInformer(pools cache.SharedIndexInformer) error {
	if err := c.addPoolHandlers(pools); err != nil {
		return err
	}
	c.refreshPools()
	return nil
}

func (c *Controller) poolCache() cache.Store {
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	return c.poolStore
}

// HasSynced reports whether every informer has listed and every handler has seen the
// listed objects; /readyz of a leader waits for it.
func (c *Controller) HasSynced() bool { return c.handlers.HasSynced() }

// Run waits for the caches, rebuilds the allocation state from Service status, then runs
// workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer c.queue.ShutDown()
	defer c.nodeQueue.ShutDown()
	defer c.poolQueue.ShutDown()
	if err := c.handlers.Err(); err != nil {
		return fmt.Errorf("registering event handlers: %w", err)
	}
	logger := klog.FromContext(ctx)
	logger.Info("Starting service load balancer controller", "workers", workers, "loadBalancerClass", c.opts.LoadBalancerClass)
	defer logger.Info("Shutting down service load balancer controller")

	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.handlers.Synced()...) {
		return nil
	}
	c.refreshPools()
	c.restore(ctx)

	var wg sync.WaitGroup
	wg.Go(func() { c.nodeQueue.Run(ctx, 1, c.syncNodes) })
	wg.Go(func() { c.poolQueue.Run(ctx, 1, c.syncPoolStatus) })
	c.queue.Run(ctx, workers, c.syncService)
	wg.Wait()
	return nil
}

// restore rebuilds who holds which address from the status of every Service this controller
// handles, before any new address is handed out: a restart or a new leader never gives a
// held address to another Service. Older Services win a conflict (two Services showing one
// address they may not share, which only a hand edit can cause); the loser is moved by its
// first sync.
func (c *Controller) restore(ctx context.Context) {
	logger := klog.FromContext(ctx)
	all, err := c.services.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot list Services to restore allocations")
		return
	}
	slices.SortFunc(all, func(a, b *v1.Service) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, svc := range all {
		if !handles(svc, c.opts.LoadBalancerClass) {
			continue
		}
		key := svc.Namespace + "/" + svc.Name
		props := propsOf(svc)
		for _, a := range statusAddrs(svc) {
			if err := c.alloc.Claim(key, a, props); err != nil {
				logger.Info("Address in Service status cannot be kept; the Service will get another", "service", key, "address", a, "err", err)
				continue
			}
			n++
		}
	}
	c.restored = true
	logger.Info("Restored address assignments from Service status", "addresses", n)
	c.updateGaugesLocked()
}

// ---- Services ----

// syncService makes the Service named by key hold valid addresses and shows them in its
// status, or releases them once it no longer wants a load balancer. It reads only from the
// caches and writes only on a real difference.
func (c *Controller) syncService(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping malformed key", "key", key)
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("service", key)
	ctx = klog.NewContext(ctx, logger)
	start := time.Now()
	defer func() { logger.V(4).Info("Finished syncing service", "duration", time.Since(start)) }()

	svc, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		// Deleted without our finalizer (or after we removed it): just forget it.
		c.release(ctx, key)
		c.stale.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if c.stale.isStale(key, svc.ResourceVersion) {
		// The cache is behind our own last write; its update event brings the key back.
		// The delayed requeue is a safety net only.
		logger.V(4).Info("Cache still has a version this controller replaced; waiting for it to catch up", "resourceVersion", svc.ResourceVersion)
		return worker.RequeueAfter(time.Second)
	}

	if handles(svc, c.opts.LoadBalancerClass) && svc.DeletionTimestamp == nil {
		err = c.ensure(ctx, key, svc)
	} else {
		err = c.cleanup(ctx, key, svc)
	}
	if err != nil {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonSyncFailed, "Error syncing load balancer: %v", err)
	}
	return err
}

// cleanup releases the Service's addresses: its status is cleared (unless it is going
// away), then the finalizer removed, and only then are the addresses handed out again, so
// two Services never show one address.
func (c *Controller) cleanup(ctx context.Context, key string, svc *v1.Service) error {
	c.mu.Lock()
	held := len(c.alloc.Assigned(key)) > 0
	c.unpendLocked(key)
	delete(c.badInput, key)
	c.mu.Unlock()
	// Our finalizer on a Service of another class belongs to that class's controller.
	ours := held || handles(svc, c.opts.LoadBalancerClass) || (svc.Spec.Type != v1.ServiceTypeLoadBalancer && c.opts.LoadBalancerClass == "")
	if !hasFinalizer(svc) || !ours {
		if held {
			c.release(ctx, key)
		}
		return nil
	}
	c.recorder.Event(svc, v1.EventTypeNormal, ReasonDeleting, "Deleting load balancer")
	if svc.DeletionTimestamp == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
		if err := c.patchIngress(ctx, svc, nil); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("clearing load balancer status: %w", err)
		}
	}
	if err := c.removeFinalizer(ctx, svc); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing load balancer cleanup finalizer: %w", err)
	}
	c.release(ctx, key)
	c.metrics.lbSync.Inc()
	c.recorder.Event(svc, v1.EventTypeNormal, ReasonDeleted, "Deleted load balancer")
	return nil
}

// release forgets key's addresses and, when that freed any, retries the Services waiting.
func (c *Controller) release(ctx context.Context, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unpendLocked(key)
	delete(c.badInput, key)
	held := c.alloc.Assigned(key)
	if len(held) == 0 {
		return
	}
	c.alloc.Release(key)
	klog.FromContext(ctx).V(2).Info("Released addresses", "service", key, "addresses", held)
	c.allocationChangedLocked()
	// Even an address that stays shared by others may now suit a waiting Service (a port
	// conflict gone), so every release retries them.
	c.wakePendingLocked()
}

// ensure adds the finalizer, assigns addresses and writes them to the status.
func (c *Controller) ensure(ctx context.Context, key string, svc *v1.Service) error {
	logger := klog.FromContext(ctx)
	plan := c.assign(ctx, key, svc)
	if plan.badInput != nil && plan.newBadInput {
		// The Service asks for something that cannot work as written; an update of the
		// Service brings it back here, and retrying or repeating the event would add
		// nothing.
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonSyncFailed, "Error syncing load balancer: %v", plan.badInput)
	}
	statusChange := !ingressEqual(svc.Status.LoadBalancer.Ingress, plan.ingress)
	if hasFinalizer(svc) && !statusChange {
		c.reportPending(svc, plan)
		return nil
	}
	c.recorder.Event(svc, v1.EventTypeNormal, ReasonEnsuring, "Ensuring load balancer")
	if !hasFinalizer(svc) {
		// The finalizer goes on before any address shows in the status, so the Service
		// cannot go away without its address being released.
		updated, err := c.addFinalizer(ctx, svc)
		if err != nil {
			return fmt.Errorf("adding load balancer cleanup finalizer: %w", err)
		}
		svc = updated
	}
	if statusChange {
		for _, m := range plan.moved {
			if len(plan.ingress) == 0 {
				c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonAddressReassigned, "Address %s is no longer valid for this Service (%s); released, waiting for another", m.from, m.why)
				continue
			}
			c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonAddressReassigned, "Address %s is no longer valid for this Service (%s); moved to %s", m.from, m.why, plan.describe())
		}
		if err := c.patchIngress(ctx, svc, plan.ingress); err != nil {
			return fmt.Errorf("updating load balancer status: %w", err)
		}
		logger.V(2).Info("Updated load balancer status", "addresses", plan.describe())
		c.metrics.lbSync.Inc()
	}
	if c.nodeCount() == 0 {
		c.recorder.Event(svc, v1.EventTypeWarning, ReasonUnavailable, "There are no available nodes for LoadBalancer")
	}
	if len(plan.ingress) > 0 {
		c.recorder.Eventf(svc, v1.EventTypeNormal, ReasonEnsured, "Ensured load balancer: %s", plan.describe())
	}
	c.reportPending(svc, plan)
	return nil
}

// reportPending emits AllocationFailed when svc has just become pending.
func (c *Controller) reportPending(svc *v1.Service, plan assignment) {
	if plan.newlyPending {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonAllocationFailed, "Failed to allocate an address: %v; will retry as soon as an address frees up", plan.pendingWhy)
	}
}

// assignment is what assign decided for one Service.
type assignment struct {
	ingress      []v1.LoadBalancerIngress
	moved        []move
	badInput     error
	newBadInput  bool // badInput differs from what was last reported
	pendingWhy   error
	newlyPending bool
}

type move struct {
	from netip.Addr
	why  string
}

func (a assignment) describe() string {
	var ips []string
	for _, in := range a.ingress {
		ips = append(ips, in.IP)
	}
	if len(ips) == 0 {
		return "no address"
	}
	return strings.Join(ips, ", ")
}

// assign decides, under the lock, which addresses the Service holds: it keeps those still
// valid, releases the others, and allocates what is missing.
func (c *Controller) assign(ctx context.Context, key string, svc *v1.Service) assignment {
	var plan assignment
	nsLabels := c.namespaceLabels(svc.Namespace)
	fams, need := families(svc)
	props := propsOf(svc)

	c.mu.Lock()
	defer c.mu.Unlock()
	wasPending := c.pending[key]
	requested, reqErr := requestedIPs(svc, fams)
	candidates, poolErr := candidatePools(c.poolInfo, svc, nsLabels)
	plan.badInput = errors.Join(reqErr, poolErr)
	if plan.badInput == nil {
		delete(c.badInput, key)
	} else if msg := plan.badInput.Error(); c.badInput[key] != msg {
		c.badInput[key] = msg
		plan.newBadInput = true
	}

	// Keep what is still valid.
	kept := map[ipam.Family]netip.Addr{}
	freedAny := false
	for _, a := range c.alloc.Assigned(key) {
		why := c.invalidHoldingLocked(svc, a, fams, requested, reqErr, candidates, nsLabels)
		if why == "" {
			if err := c.alloc.Claim(key, a, props); err != nil {
				why = err.Error()
			}
		}
		if why != "" {
			if c.alloc.ReleaseAddr(key, a) {
				freedAny = true
			}
			plan.moved = append(plan.moved, move{from: a, why: why})
			continue
		}
		kept[ipam.FamilyOf(a)] = a
	}
	prev := maps.Clone(kept)

	// Allocate what is missing.
	var failures []error
	for _, f := range fams {
		if _, ok := kept[f]; ok {
			continue
		}
		if reqErr != nil || poolErr != nil {
			failures = append(failures, fmt.Errorf("%s: the Service's request is invalid", f))
			continue
		}
		if want, ok := requested[f]; ok {
			pools := c.poolsContainingLocked(svc, want, nsLabels)
			if len(pools) == 0 {
				failures = append(failures, fmt.Errorf("%s is in no pool this Service may use", want))
				continue
			}
			if err := c.alloc.Claim(key, want, props); err != nil {
				failures = append(failures, err)
				continue
			}
			kept[f] = want
			continue
		}
		a, _, err := c.alloc.Allocate(key, f, candidates, props)
		if err != nil {
			failures = append(failures, err)
			continue
		}
		kept[f] = a
	}

	if len(kept) < need || len(kept) == 0 {
		// Not enough to serve the Service: give back what this sync took, so a half
		// dual-stack Service does not sit on addresses others could use. What it held
		// before stays: taking a working address away would only add an outage.
		for f, a := range kept {
			if _, before := prev[f]; before {
				continue
			}
			// Not counted as freed: nobody waited for an address this sync had just
			// taken, and waking the pending Services (this one included) would loop.
			c.alloc.ReleaseAddr(key, a)
			delete(kept, f)
		}
		c.pending[key] = true
		plan.pendingWhy = errors.Join(failures...)
		plan.newlyPending = !wasPending
	} else {
		c.unpendLocked(key)
	}
	addrs := make([]netip.Addr, 0, len(kept))
	for _, a := range kept {
		addrs = append(addrs, a)
	}
	plan.ingress = desiredIngress(addrs, fams)
	if freedAny {
		c.wakePendingLocked()
	}
	c.allocationChangedLocked()
	klog.FromContext(ctx).V(4).Info("Assigned", "addresses", plan.describe(), "pending", c.pending[key])
	return plan
}

// invalidHoldingLocked says why svc may no longer hold a, or "" when it may.
func (c *Controller) invalidHoldingLocked(svc *v1.Service, a netip.Addr, fams []ipam.Family, requested map[ipam.Family]netip.Addr, reqErr error, candidates []string, nsLabels labels.Set) string {
	f := ipam.FamilyOf(a)
	if !slices.Contains(fams, f) {
		return fmt.Sprintf("the Service no longer has IP family %s", f)
	}
	if reqErr == nil {
		if want, ok := requested[f]; ok {
			if want != a {
				return fmt.Sprintf("the Service asks for %s", want)
			}
			if len(c.poolsContainingLocked(svc, a, nsLabels)) == 0 {
				return "no pool this Service may use contains it any more"
			}
			return ""
		}
	}
	for _, name := range candidates {
		if p, ok := c.alloc.Pool(name); ok && p.Contains(a) {
			return ""
		}
	}
	if len(candidates) == 0 && len(c.poolsContainingLocked(svc, a, nsLabels)) > 0 && svc.Annotations[AnnotationAddressPool] == "" {
		// Held from a pool the Service may still use but that no longer auto-assigns:
		// keeping it is less disruptive than moving it.
		return ""
	}
	return "no pool this Service may use contains it any more"
}

// poolsContainingLocked returns the valid pools admitting svc that contain a.
func (c *Controller) poolsContainingLocked(svc *v1.Service, a netip.Addr, nsLabels labels.Set) []string {
	var out []string
	for _, name := range admittingPoolsFor(c.poolInfo, svc, nsLabels) {
		if p, ok := c.alloc.Pool(name); ok && p.Contains(a) {
			out = append(out, name)
		}
	}
	return out
}

func (c *Controller) unpendLocked(key string) {
	if c.pending[key] {
		delete(c.pending, key)
		c.metrics.pending.Set(float64(len(c.pending)))
	}
}

// wakePendingLocked queues every Service waiting for an address: one has just freed up, or
// pools changed.
func (c *Controller) wakePendingLocked() {
	for k := range c.pending {
		c.queue.Add(k)
	}
	c.metrics.pending.Set(float64(len(c.pending)))
}

// allocationChangedLocked schedules pool status updates and refreshes the gauges.
func (c *Controller) allocationChangedLocked() {
	for name := range c.poolInfo {
		c.poolQueue.AddAfter(name, c.opts.PoolStatusDelay)
	}
	c.updateGaugesLocked()
}

func (c *Controller) updateGaugesLocked() {
	var s ipam.Stats
	for name, pi := range c.poolInfo {
		if !pi.valid {
			continue
		}
		ps := c.alloc.Stats(name)
		s.AssignedIPv4 += ps.AssignedIPv4
		s.AvailableIPv4 += ps.AvailableIPv4
		s.AssignedIPv6 += ps.AssignedIPv6
		s.AvailableIPv6 = addSat(s.AvailableIPv6, ps.AvailableIPv6)
	}
	c.metrics.assigned.WithLabelValues("IPv4").Set(float64(s.AssignedIPv4))
	c.metrics.assigned.WithLabelValues("IPv6").Set(float64(s.AssignedIPv6))
	c.metrics.available.WithLabelValues("IPv4").Set(float64(s.AvailableIPv4))
	c.metrics.available.WithLabelValues("IPv6").Set(float64(s.AvailableIPv6))
	c.metrics.pending.Set(float64(len(c.pending)))
}

func addSat(x, y int64) int64 {
	if x > (1<<63-1)-y {
		return 1<<63 - 1
	}
	return x + y
}

func (c *Controller) namespaceLabels(name string) labels.Set {
	ns, err := c.namespaces.Get(name)
	if err != nil {
		return nil
	}
	return labels.Set(ns.Labels)
}

// ---- writes ----

func (c *Controller) addFinalizer(ctx context.Context, svc *v1.Service) (*v1.Service, error) {
	// A strategic merge patch appends to the finalizer list without replacing what others
	// put there meanwhile.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": []string{FinalizerLoadBalancerCleanup}}})
	out, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	c.replaced(svc, out, err)
	return out, err
}

// replaced records svc's version as outdated after a write that changed it.
func (c *Controller) replaced(svc, out *v1.Service, err error) {
	if err == nil && out != nil && out.ResourceVersion != svc.ResourceVersion {
		c.stale.replacedVersion(svc.Namespace+"/"+svc.Name, svc.ResourceVersion)
	}
}

func (c *Controller) removeFinalizer(ctx context.Context, svc *v1.Service) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"$deleteFromPrimitiveList/finalizers": []string{FinalizerLoadBalancerCleanup}}})
	out, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	c.replaced(svc, out, err)
	return err
}

// patchIngress replaces status.loadBalancer.ingress; a merge patch replaces the whole list.
func (c *Controller) patchIngress(ctx context.Context, svc *v1.Service, ingress []v1.LoadBalancerIngress) error {
	var value any = ingress
	if len(ingress) == 0 {
		value = nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": value}}})
	if err != nil {
		return err
	}
	out, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	c.replaced(svc, out, err)
	return err
}

// ---- pools ----

// refreshPools re-reads every IPAddressPool from the cache and hands the result to the
// allocator; every handled Service is then queued, so those holding an address no pool
// contains any more are moved, and those waiting try again.
func (c *Controller) refreshPools() {
	var objs []*v1alpha1.IPAddressPool
	for _, o := range c.poolCache().List() {
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
	infos := parsePools(objs)
	var pools []ipam.Pool
	for _, pi := range infos {
		if pi.valid {
			pools = append(pools, pi.pool)
		}
	}
	c.mu.Lock()
	c.poolInfo = infos
	c.alloc.SetPools(pools)
	restored := c.restored
	c.allocationChangedLocked()
	c.mu.Unlock()
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
	o, exists, err := c.poolCache().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	cur, err := v1alpha1.FromUnstructured(o.(*unstructured.Unstructured))
	if err != nil {
		return err
	}
	c.mu.Lock()
	pi := c.poolInfo[name]
	stats := c.alloc.Stats(name)
	c.mu.Unlock()
	if pi == nil {
		return nil
	}
	if !pi.valid {
		stats = ipam.Stats{}
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
		// The cache is behind our own last write; its update event brings nothing new,
		// so come back once it has caught up.
		return worker.RequeueAfter(200 * time.Millisecond)
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
