// Package servicelb is kube-controller-manager's service (load balancer) controller as a
// service of its own, with its own address allocation: LoadBalancer Services of its class
// get addresses from IPAddressPools (lb.kcm-split.io/v1alpha1), with upstream's contract
// (finalizer, status.loadBalancer.ingress with ipMode, Events, node set, backoff, metrics).
package servicelb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	coreinformers "k8s.io/client-go/informers/core/v1"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
	"github.com/kcm-split/kcm-split/shared/writecache"
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
	ReasonUpdated           = "UpdatedLoadBalancer"
	ReasonAllocationFailed  = "AllocationFailed"
	ReasonAddressReassigned = "AddressReassigned"
	// ReasonAddressReleased names the verified reason an address was given back.
	ReasonAddressReleased = "AddressReleased"
	// ReasonAddressUnverified: an address is kept although no pool can vouch for it now (pool
	// API absent or not synced, pool deleted or invalid). Once per episode.
	ReasonAddressUnverified = "AddressUnverified"
	// ReasonStatusOverwritten: someone else changed the status this controller wrote. Once
	// per episode; the status is restored with backoff.
	ReasonStatusOverwritten = "LoadBalancerStatusOverwritten"
	// ReasonClaimReleased: an orphan address claim (IPAddress) was deleted.
	ReasonClaimReleased = "AddressClaimReleased"
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
	claims     networkinglisters.IPAddressLister
	// poolStore is the IPAddressPool cache; it starts empty when the CRD is not installed
	// yet and is replaced once it is (SetPoolInformer). poolSynced and poolAPI say whether
	// it can be trusted: only then is an address judged against the pools.
	storeMu    sync.Mutex
	poolStore  cache.Store
	poolSynced func() bool
	poolAPI    bool
	// ownAPI and metalAPI say which pool APIs --pool-api enables. The metal* fields are
	// the MetalLB IPAddressPool cache, as the pool* ones are the project's own.
	ownAPI, metalLBAPI bool
	metalStore         cache.Store
	metalSynced        func() bool
	metalServed        bool
	metalStatus        *metalLBStatusWriter
	// handlers are the event-handler registrations; Run returns their failure, if any.
	handlers informer.Handlers

	queue     *worker.Queue[string]
	stale     *writecache.Cache[*v1.Service]
	nodeQueue *worker.Queue[string]
	poolQueue *worker.Queue[string]

	// state is who holds which address and the bookkeeping around it; its own lock makes
	// allocation decisions one at a time, whatever the number of workers.
	state *allocations
	// gaugeMu orders the gauge updates of decisions published after the state's lock:
	// gaugesShown and pendingShown are the seq of the numbers shown (see gauges).
	gaugeMu      sync.Mutex
	gaugesShown  uint64
	pendingShown uint64
	// The label sets shown, so that a pool's series go when the pool does.
	shownPools, shownFree, shownUnverified, shownPending map[[3]string]bool
	// nodeSet is the last eligible node set, sorted; nil before the first node sync.
	nodeSet atomic.Pointer[[]string]
	now     func() time.Time
}

// New builds the controller and registers its event handlers; it starts nothing. pools is
// the IPAddressPool informer (unstructured objects), or nil while the CRD is not installed
// (see SetPoolInformer); poolClient writes their status.
func New(
	services coreinformers.ServiceInformer,
	nodes coreinformers.NodeInformer,
	namespaces coreinformers.NamespaceInformer,
	pools cache.SharedIndexInformer,
	claims networkinginformers.IPAddressInformer,
	client kubernetes.Interface,
	poolClient *v1alpha1.Client,
	recorder record.EventRecorder,
	opts Options,
	reg prometheus.Registerer,
) *Controller {
	apis, err := opts.PoolAPIs()
	if err != nil {
		apis = []string{PoolAPIKCMSplit} // Validate ran before: only a test gets here
	}
	c := &Controller{
		ownAPI:     slices.Contains(apis, PoolAPIKCMSplit),
		metalLBAPI: slices.Contains(apis, PoolAPIMetalLB),
		client:     client,
		pools:      poolClient,
		recorder:   recorder,
		opts:       opts,
		metrics:    newMetrics(reg),
		services:   services.Lister(),
		nodes:      nodes.Lister(),
		namespaces: namespaces.Lister(),
		claims:     claims.Lister(),
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
			// A conflict on a pool's status retries with backoff, and gives up after
			// the default retry cap; the next allocation change queues the pool again.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](poolRetryMin, poolRetryMax),
		}),
		stale:      writecache.New[*v1.Service](),
		state:      newAllocations(apis...),
		metalStore: cache.NewStore(cache.MetaNamespaceKeyFunc),
		now:        time.Now,
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
	c.handlers.Add(claims.Informer(), cache.ResourceEventHandlerFuncs{
		DeleteFunc: c.onClaimDelete,
	})
	if pools != nil {
		c.handlers.Track(pools.HasSynced, c.addPoolHandlers(pools))
	}
	return c
}

// Pool status retries: from poolRetryMin doubling to poolRetryMax.
const (
	poolRetryMin = 200 * time.Millisecond
	poolRetryMax = time.Minute
)

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
	c.poolSynced = pools.HasSynced
	c.poolAPI = true
	c.storeMu.Unlock()
	return nil
}

// SetPoolAPIServed tells the controller whether discovery lists the IPAddressPool API.
// While it does not, the pools are unknown: no address is moved or released for a pool
// reason and none is handed out.
func (c *Controller) SetPoolAPIServed(served bool) {
	c.storeMu.Lock()
	changed := c.poolAPI != served
	c.poolAPI = served
	c.storeMu.Unlock()
	if changed {
		c.refreshPools()
	}
}

// poolsKnown reports whether every enabled pool API is served and its cache synced. One
// unknown source makes all pools unknown: a Service may be a candidate of either.
func (c *Controller) poolsKnown() bool {
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	own := !c.ownAPI || c.poolAPI && c.poolSynced != nil && c.poolSynced()
	metal := !c.metalLBAPI || c.metalServed && c.metalSynced != nil && c.metalSynced()
	return own && metal
}

// AddMetalLBInformer hands the controller the metallb.io IPAddressPool informer (with
// metalLBTransform set) before Run, and the dynamic client its status is written with: Run
// waits for it as for the other caches.
func (c *Controller) AddMetalLBInformer(pools cache.SharedIndexInformer, dyn dynamic.Interface, namespace string) {
	c.handlers.Add(pools, c.metalHandlers())
	c.useMetalLB(pools, dyn, namespace)
}

// SetMetalLBInformer is AddMetalLBInformer once the CRD appears after the start; the caller
// starts the informer after this call. The pools are refreshed once its objects have been
// handled, so a Service waits for no event that may never come.
func (c *Controller) SetMetalLBInformer(ctx context.Context, pools cache.SharedIndexInformer, dyn dynamic.Interface, namespace string) error {
	reg, err := pools.AddEventHandler(c.metalHandlers())
	if err != nil {
		return err
	}
	c.useMetalLB(pools, dyn, namespace)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			c.refreshPools()
		}
	}()
	return nil
}

func (c *Controller) metalHandlers() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.refreshPools() },
		UpdateFunc: c.onPoolUpdate,
		DeleteFunc: func(any) { c.refreshPools() },
	}
}

func (c *Controller) useMetalLB(pools cache.SharedIndexInformer, dyn dynamic.Interface, namespace string) {
	c.storeMu.Lock()
	c.metalStore = pools.GetStore()
	c.metalSynced = pools.HasSynced
	c.metalServed = true
	c.metalStatus = newMetalLBStatusWriter(dyn, namespace)
	c.storeMu.Unlock()
}

// SetMetalLBAPIServed tells the controller whether discovery lists metallb.io/v1beta1
// IPAddressPool; while it does not, every pool is unknown (see poolsKnown).
func (c *Controller) SetMetalLBAPIServed(served bool) {
	c.storeMu.Lock()
	changed := c.metalServed != served
	c.metalServed = served
	c.storeMu.Unlock()
	if changed {
		c.refreshPools()
	}
}

func (c *Controller) metalCache() (cache.Store, *metalLBStatusWriter) {
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	return c.metalStore, c.metalStatus
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
	return c.handlers.RunWhenSynced(ctx, "service load balancer controller", func(ctx context.Context) error {
		c.refreshPools()
		c.restore(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { wait.UntilWithContext(ctx, c.sweepClaims, claimSweepPeriod) })
		wg.Go(func() { c.nodeQueue.Run(ctx, 1, c.syncNodes) })
		wg.Go(func() { c.poolQueue.Run(ctx, 1, c.syncPoolStatus) })
		c.queue.Run(ctx, workers, c.syncService)
		wg.Wait()
		return nil
	}, "workers", workers, "loadBalancerClass", c.opts.LoadBalancerClass)
}

// restore rebuilds who holds which address before any new address is handed out, so that a
// restart or a new leader never gives a held address to another Service. First from the
// status of every Service this controller handles: older Services win a conflict (two
// Services showing one address they may not share, which only a hand edit can cause); the
// loser is moved by its first sync. Then from the address claims: an address claimed but not
// shown yet (by this controller before a crash, or by another process) stays reserved for the
// Service named in the claim; a claim of a Service that is gone is swept later, after a live
// check.
func (c *Controller) restore(ctx context.Context) {
	logger := klog.FromContext(ctx)
	all, err := c.services.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot list Services to restore allocations")
		return
	}
	claims, err := c.claims.List(claimSelector())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot list address claims to restore allocations")
		return
	}
	slices.SortFunc(all, func(a, b *v1.Service) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	var svcs []restoredService
	for _, svc := range all {
		if handles(svc, c.opts.LoadBalancerClass) {
			svcs = append(svcs, restoredService{key: svc.Namespace + "/" + svc.Name, props: propsOf(svc), addrs: statusAddrs(svc)})
		}
	}
	var fromClaims []restoredClaim
	for _, claim := range claims {
		a, err := netip.ParseAddr(claim.Name)
		if err != nil {
			continue
		}
		rc := restoredClaim{
			addr:   a,
			pool:   claim.Annotations[AnnotationClaimPool],
			parent: claimParent(claim),
			props:  addrpool.Props{SharingKey: claim.Annotations[AnnotationAllowSharedIP]},
		}
		if rc.parent != "" {
			ns, name, _ := cache.SplitMetaNamespaceKey(rc.parent)
			if svc, err := c.services.Services(ns).Get(name); err == nil {
				rc.skip = !handles(svc, c.opts.LoadBalancerClass)
				rc.props = propsOf(svc)
			}
		}
		fromClaims = append(fromClaims, rc)
	}
	r := c.state.restore(svcs, fromClaims, func(key string, a netip.Addr, err error) {
		logger.Info("Address in Service status cannot be kept; the Service will get another", "service", key, "address", a, "err", err)
	})
	logger.Info("Restored address assignments", "fromStatus", r.fromStatus, "fromClaims", r.fromClaims)
	c.apply(r.effects)
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
		// Deleted without our finalizer (or after we removed it): forget it.
		c.stale.Forget(key)
		return c.releaseGone(ctx, key)
	}
	if err != nil {
		return err
	}
	if c.stale.Stale(key, svc) {
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
	var rq *worker.Requeue
	if err != nil && !errors.As(err, &rq) {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonSyncFailed, "Error syncing load balancer: %v", err)
	}
	return err
}

// releaseGone forgets the addresses of a Service the cache no longer has. Their claims are
// deleted only once a live read confirms that the Service is gone (or is a new one of the
// same name): a cache miss alone never frees an address for other processes.
func (c *Controller) releaseGone(ctx context.Context, key string) error {
	held := c.state.assigned(key)
	if len(held) == 0 {
		c.release(ctx, key)
		return nil
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	live, err := c.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("confirming that the Service is gone: %w", err)
	}
	if err == nil && live.DeletionTimestamp == nil && handles(live, c.opts.LoadBalancerClass) {
		// Only the cache misses it; its add event brings it back.
		return worker.RequeueAfter(time.Second)
	}
	freed := c.release(ctx, key)
	c.deleteClaims(ctx, key, freed)
	return nil
}

// cleanupReason says why a Service no longer gets a load balancer from this controller.
func cleanupReason(svc *v1.Service, class string) string {
	switch {
	case svc.DeletionTimestamp != nil:
		return "the Service is being deleted"
	case svc.Spec.Type != v1.ServiceTypeLoadBalancer:
		return fmt.Sprintf("the Service's type is now %s", svc.Spec.Type)
	case svc.Spec.LoadBalancerClass != nil:
		return fmt.Sprintf("the Service's loadBalancerClass is now %q", *svc.Spec.LoadBalancerClass)
	default:
		return fmt.Sprintf("the Service has no loadBalancerClass but this controller serves %q", class)
	}
}

// cleanup releases the Service's addresses: its status is cleared (unless it is going
// away), then the finalizer removed, and only then are the addresses handed out again and
// their claims deleted, so two Services never show one address.
func (c *Controller) cleanup(ctx context.Context, key string, svc *v1.Service) error {
	heldAddrs, e := c.state.beginCleanup(key)
	c.apply(e)
	held := len(heldAddrs) > 0
	why := cleanupReason(svc, c.opts.LoadBalancerClass)
	// Our finalizer on a Service of another class belongs to that class's controller. A
	// Service whose type changed while no controller ran has lost its class too (the
	// apiserver drops it with the type): an address claim of ours made for this very
	// Service says it was ours.
	var claimed []netip.Addr
	if hasFinalizer(svc) && !held {
		claimed = c.claimedFor(svc)
	}
	ours := held || len(claimed) > 0 || handles(svc, c.opts.LoadBalancerClass) || (svc.Spec.Type != v1.ServiceTypeLoadBalancer && c.opts.LoadBalancerClass == "")
	if !hasFinalizer(svc) || !ours {
		if held {
			c.deleteClaims(ctx, key, c.release(ctx, key))
			c.recorder.Eventf(svc, v1.EventTypeNormal, ReasonAddressReleased, "Released %s: %s", joinAddrs(heldAddrs), why)
		}
		return nil
	}
	c.recorder.Event(svc, v1.EventTypeNormal, ReasonDeleting, "Deleting load balancer")
	if svc.DeletionTimestamp == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
		if err := c.patchIngress(ctx, svc, nil); err != nil && !apierrors.IsNotFound(err) {
			if apierrors.IsConflict(err) {
				c.metrics.conflicts.WithLabelValues(conflictStale).Inc()
			}
			return fmt.Errorf("clearing load balancer status: %w", err)
		}
	}
	if err := c.removeFinalizer(ctx, svc); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing load balancer cleanup finalizer: %w", err)
	}
	freed := c.release(ctx, key)
	freed = append(freed, c.state.unheld(claimed)...) // a Service sharing one keeps its claim
	c.deleteClaims(ctx, key, freed)
	c.metrics.lbSync.Inc()
	if held {
		c.recorder.Eventf(svc, v1.EventTypeNormal, ReasonAddressReleased, "Released %s: %s", joinAddrs(heldAddrs), why)
	}
	c.recorder.Event(svc, v1.EventTypeNormal, ReasonDeleted, "Deleted load balancer")
	return nil
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// release forgets key's addresses and, when that freed any, retries the Services waiting.
// It returns the addresses nobody holds any more.
func (c *Controller) release(ctx context.Context, key string) []netip.Addr {
	held, freed, e := c.state.release(key)
	if len(held) > 0 {
		klog.FromContext(ctx).V(2).Info("Released addresses", "service", key, "addresses", held)
	}
	c.apply(e)
	return freed
}

// deleteClaims deletes key's claims of addresses released for a verified reason. A failure
// is logged only: the sweep deletes what is left.
func (c *Controller) deleteClaims(ctx context.Context, key string, addrs []netip.Addr) {
	for _, a := range addrs {
		if err := c.deleteClaim(ctx, key, a, ""); err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "Cannot delete address claim; the orphan sweep will", "service", key, "address", a)
		}
	}
}

// maxClaimAttempts bounds how often one sync picks another address after finding the one it
// chose claimed by another Service; then the sync fails and retries with backoff.
const maxClaimAttempts = 4

// ensure adds the finalizer, assigns and claims addresses and writes them to the status.
func (c *Controller) ensure(ctx context.Context, key string, svc *v1.Service) error {
	logger := klog.FromContext(ctx)
	adopt, err := c.adoptable(ctx, key, svc)
	if err != nil {
		return err
	}
	var plan assignment
	var takenMoves []move
	for attempt := 1; ; attempt++ {
		plan = c.assign(ctx, key, svc, adopt)
		err := c.claimAll(ctx, key, svc, plan)
		if err == nil {
			break
		}
		var taken *claimTakenError
		if errors.As(err, &taken) && attempt < maxClaimAttempts {
			logger.V(2).Info("Chosen address is claimed by another Service; choosing another", "address", taken.addr, "owner", taken.owner)
			if containsAddr(statusAddrs(svc), taken.addr) {
				takenMoves = append(takenMoves, move{from: taken.addr, why: taken.Error()})
			}
			continue
		}
		c.rollback(key, svc)
		return err
	}
	plan.moved = append(takenMoves, plan.moved...)
	if plan.badInput != nil && plan.newBadInput {
		// The Service asks for something that cannot work as written; an update of the
		// Service brings it back here, and retrying or repeating the event would add
		// nothing.
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonSyncFailed, "Error syncing load balancer: %v", plan.badInput)
	}
	statusChange := !ingressEqual(svc.Status.LoadBalancer.Ingress, plan.ingress)
	if hasFinalizer(svc) && !statusChange {
		c.report(svc, plan)
		c.deleteClaims(ctx, key, plan.freed)
		if _, err := c.syncCondition(ctx, svc, plan); err != nil {
			return fmt.Errorf("updating the %s condition: %w", ConditionLoadBalancerPending, err)
		}
		return nil
	}
	if statusChange {
		wait, newEpisode := c.overwriteBackoff(key, svc, plan.ingress)
		if newEpisode {
			c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonStatusOverwritten,
				"status.loadBalancer was changed by another writer to %q; restoring %s with backoff (is another load balancer controller, or a second service-lb-controller, running?)",
				describeIngress(svc.Status.LoadBalancer.Ingress), plan.describe())
		}
		if wait > 0 {
			c.report(svc, plan)
			logger.V(2).Info("Status overwritten by another writer; backing off", "wait", wait)
			return worker.RequeueAfter(wait)
		}
	}
	c.recorder.Event(svc, v1.EventTypeNormal, ReasonEnsuring, "Ensuring load balancer")
	if !hasFinalizer(svc) {
		// The finalizer goes on before any address shows in the status, so the Service
		// cannot go away without its address being released.
		updated, err := c.addFinalizer(ctx, svc)
		if err != nil {
			c.rollback(key, svc)
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
		out, err := c.patchStatus(ctx, svc, map[string]any{"loadBalancer": map[string]any{"ingress": nilIfEmpty(plan.ingress)}})
		if err != nil {
			if apierrors.IsConflict(err) {
				// Someone wrote the Service after the version this decision was made on.
				c.metrics.conflicts.WithLabelValues(conflictStale).Inc()
			}
			c.rollback(key, svc)
			return fmt.Errorf("updating load balancer status: %w", err)
		}
		svc = out
		c.state.wrote(key, plan.ingress)
		logger.V(2).Info("Updated load balancer status", "addresses", plan.describe())
		c.metrics.lbSync.Inc()
	}
	c.deleteClaims(ctx, key, plan.freed)
	if c.nodeCount() == 0 {
		c.recorder.Event(svc, v1.EventTypeWarning, ReasonUnavailable, "There are no available nodes for LoadBalancer")
	}
	if len(plan.ingress) > 0 {
		c.recorder.Eventf(svc, v1.EventTypeNormal, ReasonEnsured, "Ensured load balancer: %s", plan.describe())
	}
	c.report(svc, plan)
	if _, err := c.syncCondition(ctx, svc, plan); err != nil {
		return fmt.Errorf("updating the %s condition: %w", ConditionLoadBalancerPending, err)
	}
	return nil
}

// adoptable returns the addresses in svc's status that key does not hold here but that are
// claimed for svc: another process (a split brain) assigned them. Taking them over ends the
// disagreement instead of overwriting each other.
func (c *Controller) adoptable(ctx context.Context, key string, svc *v1.Service) ([]netip.Addr, error) {
	held := c.state.assigned(key)
	var out []netip.Addr
	for _, a := range statusAddrs(svc) {
		if containsAddr(held, a) {
			continue
		}
		claim, err := c.claims.Get(claimName(a))
		if apierrors.IsNotFound(err) {
			claim, err = c.client.NetworkingV1().IPAddresses().Get(ctx, claimName(a), metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the claim of %s: %w", a, err)
		}
		if claim.Labels[networkingv1.LabelManagedBy] == ClaimManagedBy && claimMayUse(claim, svc) {
			out = append(out, a)
		}
	}
	return out, nil
}

// claimAll makes sure every address of plan is claimed for svc. An address found claimed
// by another Service is dropped here and recorded as that Service's, and a
// *claimTakenError returned, so the caller assigns again.
func (c *Controller) claimAll(ctx context.Context, key string, svc *v1.Service, plan assignment) error {
	shown := statusAddrs(svc)
	for _, in := range plan.ingress {
		a, err := addrpool.ParseAddr(in.IP)
		if err != nil {
			continue
		}
		err = c.ensureClaim(ctx, svc, a, c.state.poolOf(a), containsAddr(shown, a))
		var taken *claimTakenError
		if errors.As(err, &taken) {
			// Reserved here until its claim is deleted, so the next choice is another
			// address; the owner's sync takes it over if it shows it.
			e := c.state.takenElsewhere(key, a, taken.key)
			if ns, _, err := cache.SplitMetaNamespaceKey(taken.owner); err == nil && ns != "" {
				e.requeue = append(e.requeue, taken.owner)
			}
			c.apply(e)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// rollback undoes a sync whose writes failed: addresses taken that the status does not show
// are given back here. Their claims stay: a claim is the Service's, not this process's, and
// after a conflict another process may have shown that very address, relying on the claim.
// The next sync takes the address again (the claim is the Service's) or takes over what the
// other process showed; a claim left unused is deleted by the sweep.
func (c *Controller) rollback(key string, svc *v1.Service) {
	c.apply(c.state.rollback(key, statusAddrs(svc)))
}
