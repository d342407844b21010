// Package mirroring is kube-controller-manager's endpointslice-mirroring-controller
// (upstream's pkg/controller/endpointslicemirroring): it mirrors the Endpoints of Services
// without a selector, written by their owners, into EndpointSlices.
//
// Reading order: controller.go (New, Run, sync and the writes), handlers.go (which events
// queue which Endpoints), desired.go (the slices an Endpoints comes to and the writes that
// get there, pure functions), metrics.go (upstream's endpoint_slice_mirroring_controller_*).
package mirroring

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/cachedslices"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// Event reasons of the mirroring controller. The first two are upstream's; both are recorded
// on the Endpoints.
const (
	ReasonInvalidIPAddress         = "InvalidIPAddress"
	ReasonTooManyAddressesToMirror = "TooManyAddressesToMirror"
	// ReasonDeletedMirroredSlices names why mirrored slices were deleted: the Endpoints or
	// its Service went, or the Endpoints is no longer to be mirrored. Upstream deletes them
	// silently. Recorded on the Endpoints, or on the Service when the Endpoints is gone.
	ReasonDeletedMirroredSlices = "DeletedMirroredEndpointSlices"
)

// Backoff of a failing Endpoints, upstream's: 1s doubling to 100s, and no more than 10
// retries a second overall (bursts of 100).
const (
	backoffBase = time.Second
	backoffMax  = 100 * time.Second
)

// Controller mirrors the Endpoints of Services without a selector (written by their
// owners) into EndpointSlices, so that consumers of slices (kube-proxy, DNS, meshes) see
// them: kube-controller-manager's endpointslice-mirroring-controller. Endpoints of Services
// with a selector are the other two controllers' business and are never mirrored, nor are
// those labelled endpointslice.kubernetes.io/skip-mirror=true or used as leader-election
// locks.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	opts     Options

	endpoints corelisters.EndpointsLister
	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	handlers  informer.Handlers

	queue   *worker.Queue[string]
	tracker *endpointsliceutil.EndpointSliceTracker
	metrics *syncMetrics
}

// New builds the controller and registers its event handlers on the
// informers, which are shared with the binary's other controllers; it starts nothing. slices
// must hold at least the slices managed by ManagedBy. Queue, reconcile and upstream's
// endpoint_slice_mirroring_controller_* metrics go to reg (nil: none).
func New(
	endpoints coreinformers.EndpointsInformer,
	services coreinformers.ServiceInformer,
	slices discoveryinformers.EndpointSliceInformer,
	client kubernetes.Interface,
	recorder record.EventRecorder,
	opts Options,
	reg prometheus.Registerer,
) *Controller {
	c := &Controller{
		client:    client,
		recorder:  recorder,
		opts:      opts,
		endpoints: endpoints.Lister(),
		services:  services.Lister(),
		slices:    slices.Lister(),
		queue: worker.New(worker.Options[string]{
			Name:       QueueName,
			Controller: Name,
			Registerer: reg,
			RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[string](backoffBase, backoffMax),
				&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
			),
		}),
		tracker: endpointsliceutil.NewEndpointSliceTracker(),
		metrics: newSyncMetrics(reg, opts.MaxEndpointsPerSubset),
	}
	c.handlers.Add(endpoints.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onEndpoints,
		UpdateFunc: c.onEndpointsUpdate,
		DeleteFunc: c.onEndpoints,
	})
	c.handlers.Add(services.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onServiceAddOrDelete,
		UpdateFunc: c.onServiceUpdate,
		DeleteFunc: c.onServiceAddOrDelete,
	})
	c.handlers.Add(slices.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onSliceAdd,
		UpdateFunc: c.onSliceUpdate,
		DeleteFunc: c.onSliceDelete,
	})
	return c
}

// HasSynced reports whether the informers have listed and the handlers have seen every
// listed object.
func (c *Controller) HasSynced() bool { return c.handlers.HasSynced() }

// Run waits for the caches and runs workers until ctx ends; it returns nil when ctx ends.
// The informers' initial listing queues every Endpoints that may be mirrored, so a start
// over correct slices reads them all and writes nothing.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer c.queue.ShutDown()
	return c.handlers.RunWhenSynced(ctx, "endpoint slice mirroring controller", func(ctx context.Context) error {
		c.queue.Run(ctx, workers, c.syncEndpoints)
		return nil
	}, "workers", workers, "maxEndpointsPerSubset", c.opts.MaxEndpointsPerSubset, "batchPeriod", c.opts.BatchPeriod)
}

// syncEndpoints times one sync in upstream's endpoints_sync_duration.
func (c *Controller) syncEndpoints(ctx context.Context, key string) error {
	start := time.Now()
	err := c.sync(ctx, key)
	c.metrics.syncDuration.Observe(time.Since(start).Seconds())
	klog.FromContext(ctx).V(4).Info("Finished mirroring endpoints", "endpoints", key, "duration", time.Since(start))
	return err
}

// sync brings the mirrored slices of the Endpoints named by key (namespace/name) in line
// with it, or deletes them when it is not to be mirrored (any more).
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping malformed key", "key", key)
		return nil
	}
	if !c.opts.Shard.Owns(namespace) {
		return nil // another shard's key
	}
	logger := klog.FromContext(ctx).WithValues("endpoints", key)
	ctx = klog.NewContext(ctx, logger)

	ep, err := c.endpoints.Endpoints(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.confirmGone(ctx, "Endpoints", func() error {
			_, err := c.client.CoreV1().Endpoints(namespace).Get(ctx, name, metav1.GetOptions{})
			return err
		}); err != nil {
			return err
		}
		// The Service, if any, is where the Event can still be read.
		var subject runtime.Object = &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		if svc, err := c.services.Services(namespace).Get(name); err == nil {
			subject = svc
		}
		return c.unmirror(ctx, namespace, name, subject, "the Endpoints was deleted")
	case err != nil:
		return err
	case !shouldMirror(ep):
		return c.unmirror(ctx, namespace, name, ep, notMirroredReason(ep))
	}
	svc, err := c.services.Services(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.confirmGone(ctx, "Service", func() error {
			_, err := c.client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
			return err
		}); err != nil {
			return err
		}
		return c.unmirror(ctx, namespace, name, ep, "its Service was deleted")
	case err != nil:
		return err
	case svc.Spec.Selector != nil:
		// The endpoints and endpointslice controllers own this Service's Endpoints and slices.
		return c.unmirror(ctx, namespace, name, ep, "its Service has a selector, so the endpointslice controller writes its EndpointSlices")
	}

	existing, err := c.mirroredSlices(namespace, name)
	if err != nil {
		return err
	}
	if c.tracker.StaleSlices(svc, existing) {
		return cachedslices.ErrStale
	}
	return c.reconcile(ctx, ep, existing)
}

// mirroredSlices lists the slices this controller made for the Endpoints namespace/name,
// those being deleted left out.
func (c *Controller) mirroredSlices(namespace, name string) ([]*discovery.EndpointSlice, error) {
	list, err := c.slices.EndpointSlices(namespace).List(labels.SelectorFromValidatedSet(labels.Set{
		discovery.LabelServiceName: name,
		discovery.LabelManagedBy:   ManagedBy,
	}))
	if err != nil {
		return nil, err
	}
	return cachedslices.WithoutDeleted(list), nil
}

// reconcile computes the slices of ep and writes what differs from existing.
func (c *Controller) reconcile(ctx context.Context, ep *v1.Endpoints, existing []*discovery.EndpointSlice) error {
	logger := klog.FromContext(ctx)
	maxPer := c.opts.MaxEndpointsPerSubset
	d := desiredOf(ep, maxPer)
	c.metrics.skipped.Observe(float64(d.skipped))
	if d.invalid > 0 {
		c.recorder.Eventf(ep, v1.EventTypeWarning, ReasonInvalidIPAddress,
			"Skipped %d invalid IP addresses when mirroring to EndpointSlices", d.invalid)
	}
	if d.skipped > d.invalid {
		logger.Info("Addresses past the per-subset maximum were not mirrored", "skippedAddresses", d.skipped, "maxEndpointsPerSubset", maxPer)
		c.recorder.Eventf(ep, v1.EventTypeWarning, ReasonTooManyAddressesToMirror,
			"A max of %d addresses can be mirrored to EndpointSlices per Endpoints subset. %d addresses were skipped", maxPer, d.skipped)
	}

	plan := planWrites(ep, existing, d, maxPer)
	c.metrics.added.Observe(float64(plan.added))
	c.metrics.updated.Observe(float64(plan.updated))
	c.metrics.removed.Observe(float64(plan.removed))
	c.metrics.record(ep.Namespace+"/"+ep.Name, plan.endpointsPerSlice)
	// Slices found right are tracked too, so a later event for them at this version is
	// known not to be news.
	for _, s := range existing {
		if !c.tracker.Has(s) {
			c.tracker.Update(s)
		}
	}
	if len(plan.create)+len(plan.update)+len(plan.remove) == 0 {
		return nil
	}
	logger.V(4).Info("Writing mirrored slices", "create", len(plan.create), "update", len(plan.update), "delete", len(plan.remove))
	return c.write(ctx, ep, plan)
}

// write performs the plan: creates (unless the Endpoints is being deleted), updates, then
// deletes, the tracker told of each so that their events are not taken for news.
func (c *Controller) write(ctx context.Context, ep *v1.Endpoints, plan writePlan) error {
	client := c.client.DiscoveryV1().EndpointSlices(ep.Namespace)
	if ep.DeletionTimestamp == nil {
		for _, s := range plan.create {
			created, err := client.Create(ctx, s, metav1.CreateOptions{})
			if err != nil {
				if apierrors.HasStatusCause(err, v1.NamespaceTerminatingCause) {
					return nil // the namespace and everything in it is going
				}
				return fmt.Errorf("creating EndpointSlice for Endpoints %s/%s: %w", ep.Namespace, ep.Name, err)
			}
			c.tracker.Update(created)
			c.metrics.changes.WithLabelValues("create").Inc()
		}
	}
	for _, s := range plan.update {
		updated, err := client.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("updating EndpointSlice %s for Endpoints %s/%s: %w", sliceName(s), ep.Namespace, ep.Name, err)
		}
		c.tracker.Update(updated)
		c.metrics.changes.WithLabelValues("update").Inc()
	}
	for _, s := range plan.remove {
		if _, err := c.deleteSlice(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// unmirror deletes the slices mirrored for namespace/name, if any, and forgets it. why is the
// verified reason, named in an Event on subject (the Endpoints, or its Service once the
// Endpoints is gone) by the sync that deleted slices. A sync repeated over a cache that still
// lists them finds them gone (NotFound) and records nothing, so an episode has one Event;
// only a partial failure adds one more, from the retry, for the slices it deletes.
func (c *Controller) unmirror(ctx context.Context, namespace, name string, subject runtime.Object, why string) error {
	existing, err := c.mirroredSlices(namespace, name)
	if err != nil {
		return err
	}
	c.tracker.DeleteService(namespace, name)
	c.metrics.record(namespace+"/"+name, nil)
	if len(existing) == 0 {
		return nil
	}
	var errs []error
	deleted := 0
	for _, s := range existing {
		ok, err := c.deleteSlice(ctx, s)
		if ok {
			deleted++
		}
		errs = append(errs, err)
	}
	if deleted > 0 {
		klog.FromContext(ctx).V(2).Info("Deleted mirrored slices", "reason", why, "slices", deleted)
		c.recorder.Eventf(subject, v1.EventTypeNormal, ReasonDeletedMirroredSlices,
			"Deleted %d EndpointSlice(s) mirrored from Endpoints %s/%s: %s", deleted, namespace, name, why)
	}
	return errors.Join(errs...)
}

// deleteSlice deletes one mirrored slice, the object listed (its UID as a precondition): a
// slice of the same name made since is not deleted blind. It reports whether this call
// deleted it; a slice already gone is no error.
func (c *Controller) deleteSlice(ctx context.Context, s *discovery.EndpointSlice) (bool, error) {
	err := c.client.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &s.UID},
	})
	switch {
	case err == nil:
		c.tracker.ExpectDeletion(s)
		c.metrics.changes.WithLabelValues("delete").Inc()
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("deleting EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
}

// shouldMirror reports whether an Endpoints object may be mirrored at all, whatever its
// Service: not when labelled endpointslice.kubernetes.io/skip-mirror=true, nor when it is a
// leader-election lock.
func shouldMirror(ep *v1.Endpoints) bool { return ep != nil && notMirroredReason(ep) == "" }

// notMirroredReason says why ep is not to be mirrored, "" when it may be.
func notMirroredReason(ep *v1.Endpoints) string {
	if ep.Labels[discovery.LabelSkipMirror] == "true" {
		return "the Endpoints is labelled " + discovery.LabelSkipMirror + "=true"
	}
	if _, lock := ep.Annotations[resourcelock.LeaderElectionRecordAnnotationKey]; lock {
		return "the Endpoints is a leader-election lock"
	}
	return ""
}

// confirmGone returns nil when an object missing from the cache is gone: always unsharded
// (upstream's rule: the synced cache is the truth), and for a sharded controller only when
// get, a live read, answers NotFound (its cache can miss what exists). Otherwise it returns
// an error: the key is retried with backoff and nothing is deleted meanwhile.
func (c *Controller) confirmGone(ctx context.Context, kind string, get func() error) error {
	if !c.opts.Shard.Sharded() {
		return nil
	}
	switch err := get(); {
	case err == nil:
		return fmt.Errorf("%s missing from this shard's cache exists: not deleting mirrored slices", kind)
	case apierrors.IsNotFound(err):
		return nil
	default:
		return err
	}
}
