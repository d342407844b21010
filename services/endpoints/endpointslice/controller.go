// Package endpointslice is kube-controller-manager's endpointslice-controller (upstream's
// pkg/controller/endpointslice): it keeps the EndpointSlices of Services with a selector in
// step with their Pods, around k8s.io/endpointslice, the library upstream's controller is
// built on (Reconciler, EndpointSliceTracker, topology cache, trigger times, metrics).
//
// Reading order: controller.go (New, Run, sync), handlers.go (which events queue which
// Service), metrics.go (the library's endpoint_slice_controller_* metrics on our registry).
package endpointslice

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	endpointslicerec "k8s.io/endpointslice"
	endpointslicemetrics "k8s.io/endpointslice/metrics"
	"k8s.io/endpointslice/topologycache"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/cachedslices"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/podservices"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// Event reasons of the EndpointSlice controller, upstream's. The library's Reconciler records
// the topology-hint ones itself.
const (
	ReasonFailedToListPods            = "FailedToListPods"
	ReasonFailedToListEndpointSlices  = "FailedToListEndpointSlices"
	ReasonFailedToUpdateEndpointSlice = "FailedToUpdateEndpointSlices"
)

const (
	// changeMinDelay is how long a Service waits after a change to one of its slices
	// that this controller did not expect (someone else's write, a deletion): a burst of
	// such changes to a Service's slices becomes one sync.
	changeMinDelay = time.Second
	// Backoff of a failing Service, upstream's: 1s doubling to 1000s, and no more than 10
	// retries a second overall (bursts of 100), so that a failing apiserver is not hammered
	// by the Services' slices.
	backoffBase = time.Second
	backoffMax  = 1000 * time.Second
	// topologyKey is the one key of the topology queue: every Node change asks for the same
	// recomputation of zone capacities.
	topologyKey = "topology"
)

// Controller keeps the EndpointSlices of Services with a selector in step with their Pods.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	opts     Options

	services  corelisters.ServiceLister
	selectors informer.ServiceSelectors
	pods      corelisters.PodLister
	slices    discoverylisters.EndpointSliceLister
	nodes     corelisters.NodeLister
	handlers  informer.Handlers

	queue *worker.Queue[string]
	// topology recomputes zone capacities after Node changes, one at a time.
	topology *worker.Queue[string]

	reconciler    *endpointslicerec.Reconciler
	tracker       *endpointsliceutil.EndpointSliceTracker
	triggers      *endpointsliceutil.TriggerTimeTracker
	topologyCache *topologycache.TopologyCache
}

// New builds the controller and registers its event handlers on the informers, which may be
// shared with the Endpoints controller; it starts nothing. slices should hold only the
// EndpointSlices this controller manages (a label selector on ManagedBy), nodes
// the Nodes' zones, readiness and CPU. preferSame is the PreferSameTrafficDistribution gate.
// Queue, reconcile and upstream's endpoint_slice_controller_* metrics go to reg (nil: none).
func New(
	pods coreinformers.PodInformer,
	services coreinformers.ServiceInformer,
	slices discoveryinformers.EndpointSliceInformer,
	nodes coreinformers.NodeInformer,
	client kubernetes.Interface,
	recorder record.EventRecorder,
	opts Options,
	preferSame bool,
	reg prometheus.Registerer,
) *Controller {
	c := &Controller{
		client:    client,
		recorder:  recorder,
		opts:      opts,
		services:  services.Lister(),
		selectors: informer.SelectingServices(services.Informer()),
		pods:      podservices.Lister(pods),
		slices:    slices.Lister(),
		nodes:     nodes.Lister(),
		queue: worker.New(worker.Options[string]{
			Name:       QueueName,
			Controller: Name,
			Registerer: reg,
			RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[string](backoffBase, backoffMax),
				&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
			),
		}),
		// Unnamed and unmeasured, as upstream's: one key, one worker.
		topology:      worker.New(worker.Options[string]{Controller: Name, MaxRetries: -1}),
		tracker:       endpointsliceutil.NewEndpointSliceTracker(),
		triggers:      endpointsliceutil.NewTriggerTimeTracker(),
		topologyCache: topologycache.NewTopologyCache(),
	}
	registerMetrics(reg)
	c.reconciler = endpointslicerec.NewReconciler(client, c.nodes, int32(opts.MaxEndpointsPerSlice), c.tracker,
		c.topologyCache, recorder, ManagedBy, endpointslicerec.WithPreferSameTrafficDistributionEnabled(preferSame))

	c.handlers.Add(services.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueService,
		UpdateFunc: func(_, cur any) { c.enqueueService(cur) },
		DeleteFunc: c.enqueueService,
	})
	c.handlers.Add(pods.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onPodAddOrDelete,
		UpdateFunc: func(old, cur any) { c.enqueuePodServices(podservices.ForUpdate(c.selectors, old, cur)) },
		DeleteFunc: c.onPodAddOrDelete,
	})
	c.handlers.Add(slices.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onSliceAdd,
		UpdateFunc: c.onSliceUpdate,
		DeleteFunc: c.onSliceDelete,
	})
	c.handlers.Add(nodes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.topology.Add(topologyKey) },
		UpdateFunc: c.onNodeUpdate,
		DeleteFunc: func(any) { c.topology.Add(topologyKey) },
	})
	return c
}

// HasSynced reports whether the informers have listed and the handlers have seen every
// listed object.
func (c *Controller) HasSynced() bool { return c.handlers.HasSynced() }

// Run waits for the caches and runs workers until ctx ends. It returns nil when ctx ends.
// Every Service is queued by the informers' initial listing, so a start over correct slices
// reads them all and writes nothing.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer c.queue.ShutDown()
	defer c.topology.ShutDown()
	return c.handlers.RunWhenSynced(ctx, "endpoint slice controller", func(ctx context.Context) error {
		topologyDone := make(chan struct{})
		go func() {
			defer close(topologyDone)
			c.topology.Run(ctx, 1, c.syncTopology)
		}()
		c.queue.Run(ctx, workers, c.syncService)
		<-topologyDone
		return nil
	}, "workers", workers, "maxEndpointsPerSlice", c.opts.MaxEndpointsPerSlice, "batchPeriod", c.opts.BatchPeriod)
}

// syncService runs one sync and counts it in endpoint_slice_controller_syncs, upstream's way.
func (c *Controller) syncService(ctx context.Context, key string) error {
	err := c.sync(ctx, key)
	result := "success"
	switch {
	case errors.Is(err, cachedslices.ErrStale):
		result = "stale"
	case err != nil:
		result = "error"
	}
	endpointslicemetrics.EndpointSliceSyncs.WithLabelValues(result).Inc()
	return err
}

// sync brings the EndpointSlices of the Service named by key (namespace/name) in line with
// the Service and its Pods. The library's Reconciler computes the slices and writes only
// what differs; this reads the caches and guards against stale ones.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping malformed key", "key", key)
		return nil
	}
	if !c.opts.Shard.Owns(namespace) {
		return nil // another shard's key
	}
	logger := klog.FromContext(ctx).WithValues("service", key)
	start := time.Now()
	defer func() {
		logger.V(4).Info("Finished syncing service endpoint slices", "duration", time.Since(start))
	}()

	svc, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		// The slices go with the Service: they are owned by it, and the garbage collector
		// deletes them. Only what is remembered about them goes here.
		c.triggers.DeleteService(namespace, name)
		c.reconciler.DeleteService(namespace, name)
		c.tracker.DeleteService(namespace, name)
		return nil
	}
	if err != nil {
		return err
	}
	// ExternalName Services have no endpoints; Services without a selector get slices from
	// their owner, never from this controller.
	if svc.Spec.Type == v1.ServiceTypeExternalName || svc.Spec.Selector == nil {
		return nil
	}

	pods, err := c.pods.Pods(namespace).List(labels.SelectorFromValidatedSet(svc.Spec.Selector))
	if err != nil {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonFailedToListPods,
			"Error listing Pods for Service %s/%s: %v", namespace, name, err)
		return err
	}
	slices, err := c.slices.EndpointSlices(namespace).List(labels.SelectorFromValidatedSet(labels.Set{
		discovery.LabelServiceName: name,
		discovery.LabelManagedBy:   ManagedBy,
	}))
	if err != nil {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonFailedToListEndpointSlices,
			"Error listing Endpoint Slices for Service %s/%s: %v", namespace, name, err)
		return err
	}
	slices = cachedslices.WithoutDeleted(slices)
	if c.tracker.StaleSlices(svc, slices) {
		return cachedslices.ErrStale
	}
	// Computed before reconciling so the tracker learns the state even when nothing is
	// written.
	triggerTime := c.triggers.ComputeEndpointLastChangeTriggerTime(namespace, svc, pods)
	if err := c.reconciler.Reconcile(logger, svc, pods, slices, triggerTime); err != nil {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonFailedToUpdateEndpointSlice,
			"Error updating Endpoint Slices for Service %s/%s: %v", namespace, name, err)
		return err
	}
	return nil
}

// syncTopology feeds the Nodes to the topology cache and queues the Services whose hints
// no longer fit the zones' capacities.
func (c *Controller) syncTopology(ctx context.Context, _ string) error {
	logger := klog.FromContext(ctx)
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	c.topologyCache.SetNodes(logger, nodes)
	for _, key := range c.topologyCache.GetOverloadedServices() {
		logger.V(2).Info("Queuing Service after Node change due to overloading", "service", key)
		c.queue.Add(key)
	}
	return nil
}
