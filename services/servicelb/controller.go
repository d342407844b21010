// Package servicelb is kube-controller-manager's service (load balancer) controller as a
// service of its own, with its own address allocation: LoadBalancer Services of its class
// get addresses from IPAddressPools (lb.kcm-split.io/v1alpha1, or MetalLB's), with upstream's
// contract (finalizer, status.loadBalancer.ingress with ipMode, Events, node set, backoff,
// metrics). This package is the controller: informers, queues and API writes. Who holds
// which address is decided in allocation/, pools are read and parsed in poolsource/, and
// addresses are counted and picked in addrpool/.
package servicelb

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
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
	"github.com/kcm-split/kcm-split/services/servicelb/allocation"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
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
	recorder record.EventRecorder
	opts     Options
	metrics  *controllerMetrics

	services   corelisters.ServiceLister
	nodes      corelisters.NodeLister
	namespaces corelisters.NamespaceLister
	claims     networkinglisters.IPAddressLister
	// pools are the pool APIs --pool-api enables, in its order, each with its cache.
	pools []*poolFeed
	// handlers are the event-handler registrations; Run returns their failure, if any.
	handlers informer.Handlers

	queue     *worker.Queue[string]
	stale     *writecache.Cache[*v1.Service]
	nodeQueue *worker.Queue[string]
	poolQueue *worker.Queue[string]

	// state is who holds which address; its own lock makes allocation decisions one at a
	// time, whatever the number of workers.
	state *allocation.State
	// gauges shows the state's numbers in the order the decisions were made.
	gauges *gaugeView
	// nodeSet is the last eligible node set, sorted; nil before the first node sync.
	nodeSet atomic.Pointer[[]string]
	now     func() time.Time
}

// New builds the controller and registers its event handlers; it starts nothing. sources
// are the pool APIs to read, in order; each one's informer is handed over with AddPoolInformer
// (before Run) or SetPoolInformer (once its API appears after the start).
func New(
	services coreinformers.ServiceInformer,
	nodes coreinformers.NodeInformer,
	namespaces coreinformers.NamespaceInformer,
	claims networkinginformers.IPAddressInformer,
	client kubernetes.Interface,
	recorder record.EventRecorder,
	opts Options,
	reg prometheus.Registerer,
	sources ...poolsource.Source,
) *Controller {
	var apis []poolsource.API
	var feeds []*poolFeed
	for _, src := range sources {
		apis = append(apis, src.API())
		feeds = append(feeds, &poolFeed{src: src, store: cache.NewStore(cache.MetaNamespaceKeyFunc)})
	}
	state := allocation.New(apis...)
	m := newMetrics(reg)
	c := &Controller{
		client:     client,
		recorder:   recorder,
		opts:       opts,
		metrics:    m,
		services:   services.Lister(),
		nodes:      nodes.Lister(),
		namespaces: namespaces.Lister(),
		claims:     claims.Lister(),
		pools:      feeds,
		queue:      newQueue(QueueName, reg, opts.MinRetryDelay, opts.MaxRetryDelay),
		nodeQueue:  newQueue(NodeQueueName, reg, opts.MinRetryDelay, opts.MaxRetryDelay),
		// A conflict on a pool's status retries with backoff, and gives up after the
		// default retry cap; the next allocation change queues the pool again.
		poolQueue: newQueue(PoolQueueName, reg, poolRetryMin, poolRetryMax),
		stale:     writecache.New[*v1.Service](),
		state:     state,
		gauges:    newGaugeView(m, state.APIs()),
		now:       time.Now,
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
	return c
}

// newQueue is a queue named name (its workqueue_* label) with per-item backoff from lo
// doubling to hi.
func newQueue(name string, reg prometheus.Registerer, lo, hi time.Duration) *worker.Queue[string] {
	return worker.New(worker.Options[string]{
		Name:        name,
		Controller:  ControllerID,
		Registerer:  reg,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](lo, hi),
	})
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
	var svcs []allocation.RestoredService
	for _, svc := range all {
		if handles(svc, c.opts.LoadBalancerClass) {
			svcs = append(svcs, allocation.RestoredService{Key: svc.Namespace + "/" + svc.Name, Props: allocation.PropsOf(svc), Addrs: statusAddrs(svc)})
		}
	}
	var fromClaims []allocation.RestoredClaim
	for _, claim := range claims {
		a, err := netip.ParseAddr(claim.Name)
		if err != nil {
			continue
		}
		rc := allocation.RestoredClaim{
			Addr:   a,
			Pool:   claim.Annotations[AnnotationClaimPool],
			Parent: claimParent(claim),
			Props:  addrpool.Props{SharingKey: claim.Annotations[poolsource.AnnotationAllowSharedIP]},
		}
		if rc.Parent != "" {
			ns, name, _ := cache.SplitMetaNamespaceKey(rc.Parent)
			if svc, err := c.services.Services(ns).Get(name); err == nil {
				rc.Skip = !handles(svc, c.opts.LoadBalancerClass)
				rc.Props = allocation.PropsOf(svc)
			}
		}
		fromClaims = append(fromClaims, rc)
	}
	r := c.state.Restore(svcs, fromClaims, func(key string, a netip.Addr, err error) {
		logger.Info("Address in Service status cannot be kept; the Service will get another", "service", key, "address", a, "err", err)
	})
	logger.Info("Restored address assignments", "fromStatus", r.FromStatus, "fromClaims", r.FromClaims)
	c.apply(r.Effects)
}

// apply does what a decision over the state asks for, after its lock was released.
func (c *Controller) apply(e allocation.Effects) {
	for _, k := range e.Requeue {
		c.queue.Add(k)
	}
	for _, name := range e.Pools {
		c.poolQueue.AddAfter(name, c.opts.PoolStatusDelay)
	}
	c.gauges.show(e.Gauges)
}
