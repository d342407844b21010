// Package endpoints is kube-controller-manager's endpoints controller (upstream's
// pkg/controller/endpoint). For every Service with a selector it maintains the core/v1
// Endpoints object of the same name: the IPs and ports of the Pods the Service selects, ready
// ones under addresses and the others under notReadyAddresses. Their EndpointSlices are the
// endpointslice package's; the custom Endpoints of Services without a selector are mirrored
// into slices by the mirroring package.
//
// Reading order: controller.go (New, Run, syncService), handlers.go (which events queue which
// Service), addresses.go (the Endpoints a Service's Pods come to), truncate.go (the 1000
// address cap), desired.go (labels, annotations, and when a write is due), triggertime.go
// (the last-change-trigger-time annotation).
package endpoints

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/podservices"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
	"github.com/kcm-split/kcm-split/shared/writecache"
)

// Event reasons, upstream's.
const (
	ReasonFailedToCreate = "FailedToCreateEndpoint"
	ReasonFailedToUpdate = "FailedToUpdateEndpoint"
)

// Controller keeps Endpoints in step with Services and their Pods.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	opts     Options

	services  corelisters.ServiceLister
	selectors informer.ServiceSelectors // which Services select a Pod, indexed
	pods      corelisters.PodLister
	endpoints corelisters.EndpointsLister
	// handlers are the event-handler registrations; Run returns their failure, if any.
	handlers informer.Handlers

	queue    *worker.Queue[string]
	stale    *writecache.Cache[*metav1.ObjectMeta] // Endpoints versions replaced (the new one kept as a marker, not the object)
	triggers *triggerTracker
}

// New builds the controller and registers its event handlers on the informers; it starts
// nothing. The caller starts the informers' factory after New and then calls Run. Queue and
// reconcile metrics go to reg (nil: none).
func New(
	pods coreinformers.PodInformer,
	services coreinformers.ServiceInformer,
	endpoints coreinformers.EndpointsInformer,
	client kubernetes.Interface,
	recorder record.EventRecorder,
	opts Options,
	reg prometheus.Registerer,
) *Controller {
	c := &Controller{
		client:    client,
		recorder:  recorder,
		opts:      opts,
		services:  services.Lister(),
		selectors: informer.SelectingServices(services.Informer()),
		pods:      podservices.Lister(pods),
		endpoints: endpoints.Lister(),
		queue: worker.New(worker.Options[string]{
			Name:       QueueName,
			Controller: Name,
			Registerer: reg,
		}),
		stale:    writecache.New[*metav1.ObjectMeta](),
		triggers: newTriggerTracker(),
	}
	// Service updates are not filtered: nearly any change (selector, ports, labels, type,
	// cluster IP) can matter, and a sync that finds nothing to change costs no API call.
	c.handlers.Add(services.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.enqueue,
	})
	c.handlers.Add(pods.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onPodAdd,
		UpdateFunc: c.onPodUpdate,
		DeleteFunc: c.onPodDelete,
	})
	// Of the Endpoints' own events only deletion matters: a deleted Endpoints whose Service
	// still exists is recreated at once.
	c.handlers.Add(endpoints.Informer(), cache.ResourceEventHandlerFuncs{
		DeleteFunc: c.enqueue,
	})
	return c
}

// HasSynced reports whether the informers have listed and the handlers have seen every
// listed object; /readyz of a leader waits for it.
func (c *Controller) HasSynced() bool { return c.handlers.HasSynced() }

// Run waits for the caches, queues every existing Endpoints so that those whose Service is
// gone are deleted, and runs workers until ctx ends. It returns nil when ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer c.queue.ShutDown()
	return c.handlers.RunWhenSynced(ctx, "endpoints controller", func(ctx context.Context) error {
		c.queueAllEndpoints(ctx)
		c.queue.Run(ctx, workers, c.syncService)
		return nil
	}, "workers", workers, "batchPeriod", c.opts.BatchPeriod)
}

// queueAllEndpoints queues the key of every Endpoints. A Service deleted while no controller
// ran left its Endpoints behind with no event to bring them up; syncing the key deletes them.
// Endpoints used as leader-election locks have no Service by design and are left alone.
func (c *Controller) queueAllEndpoints(ctx context.Context) {
	all, err := c.endpoints.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot list Endpoints; orphaned ones stay until the next restart")
		return
	}
	for _, ep := range all {
		if _, lock := ep.Annotations[resourcelock.LeaderElectionRecordAnnotationKey]; lock {
			continue
		}
		c.queue.Add(ep.Namespace + "/" + ep.Name)
	}
}

// syncService brings the Endpoints of the Service named by key (namespace/name) in line with
// the Service and its Pods, reading only from the informers' caches and writing only when
// something differs. An error sends the key back for a retry with backoff.
func (c *Controller) syncService(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		// Keys come from our own handlers; a malformed one could never succeed.
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping malformed key", "key", key)
		return nil
	}
	if !c.opts.Shard.Owns(namespace) {
		return nil // another shard's: its informers only let this one's through, but a key is a key
	}
	// The key is ns/name already: logged as a string, it reads the same in every log format.
	logger := klog.FromContext(ctx).WithValues("service", key)
	ctx = klog.NewContext(ctx, logger)
	start := time.Now()
	defer func() {
		logger.V(4).Info("Finished syncing service endpoints", "duration", time.Since(start))
	}()

	svc, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		if c.opts.Shard.Sharded() {
			return c.deleteEndpointsConfirmed(ctx, namespace, name)
		}
		return c.deleteEndpoints(ctx, namespace, name)
	}
	if err != nil {
		return err
	}
	// An ExternalName Service is a DNS alias: there is nothing behind it to list.
	if svc.Spec.Type == v1.ServiceTypeExternalName {
		return nil
	}
	// A Service without a selector has Endpoints written by its owner, which must not be
	// touched.
	if svc.Spec.Selector == nil {
		return nil
	}

	pods, err := c.pods.Pods(namespace).List(labels.SelectorFromValidatedSet(svc.Spec.Selector))
	if err != nil {
		return err
	}
	triggerTime := c.triggers.compute(svc, pods)
	if err := c.reconcile(ctx, svc, pods, triggerTime); err != nil {
		c.triggers.retry(namespace, name, triggerTime)
		return err
	}
	return nil
}

// reconcile computes the Service's Endpoints and writes them if they differ.
func (c *Controller) reconcile(ctx context.Context, svc *v1.Service, pods []*v1.Pod, triggerTime time.Time) error {
	logger := klog.FromContext(ctx)
	subsets, truncated := truncateSubsets(desiredSubsets(svc, pods), maxAddresses)

	current, err := c.endpoints.Endpoints(svc.Namespace).Get(svc.Name)
	switch {
	case apierrors.IsNotFound(err):
		current = nil
	case err != nil:
		return err
	// A version this controller replaced: wait for the cache. Computed from it, a desired state
	// gone back to what it says would look like "nothing to do" and leave our newer write.
	case c.stale.Stale(current.Namespace+"/"+current.Name, &current.ObjectMeta):
		return fmt.Errorf("endpoints %s/%s: informer cache still has resourceVersion %s, which this controller has already replaced",
			current.Namespace, current.Name, current.ResourceVersion)
	}
	if current != nil && upToDate(current, svc, subsets, truncated) {
		logger.V(5).Info("Endpoints up to date")
		return nil
	}

	desired := buildEndpoints(current, svc, subsets, truncated, triggerTime)
	ready, notReady := 0, 0
	for i := range subsets {
		ready += len(subsets[i].Addresses)
		notReady += len(subsets[i].NotReadyAddresses)
	}
	logger.V(4).Info("Writing endpoints", "create", current == nil,
		"readyAddresses", ready, "notReadyAddresses", notReady, "truncated", truncated)
	if current == nil {
		return c.create(ctx, svc, desired)
	}
	return c.update(ctx, svc, current, desired)
}

func (c *Controller) create(ctx context.Context, svc *v1.Service, ep *v1.Endpoints) error {
	_, err := c.client.CoreV1().Endpoints(svc.Namespace).Create(ctx, ep, metav1.CreateOptions{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, v1.NamespaceTerminatingCause):
		// Nothing can be created in a terminating namespace, and the Service is about to
		// go with it: retrying would only fail again.
		klog.FromContext(ctx).V(5).Info("Not creating endpoints in a terminating namespace")
		return nil
	}
	// AlreadyExists too, as upstream: most often the informer has not yet delivered an
	// Endpoints object that exists (made by someone else, or by this controller a moment ago);
	// the retry with backoff finds it in the cache, and the event recorder folds repeats into
	// one Event with a count.
	c.recorder.Eventf(ep, v1.EventTypeWarning, ReasonFailedToCreate,
		"Failed to create endpoint for service %s/%s: %v", svc.Namespace, svc.Name, err)
	return err
}

func (c *Controller) update(ctx context.Context, svc *v1.Service, current, ep *v1.Endpoints) error {
	updated, err := c.client.CoreV1().Endpoints(svc.Namespace).Update(ctx, ep, metav1.UpdateOptions{})
	if err != nil {
		c.recorder.Eventf(ep, v1.EventTypeWarning, ReasonFailedToUpdate,
			"Failed to update endpoint %s/%s: %v", svc.Namespace, svc.Name, err)
		return err
	}
	// An update the API server turned into a no-op (admission may) keeps the version; the
	// cached copy is then not behind.
	if updated.ResourceVersion != current.ResourceVersion {
		c.stale.Wrote(current.Namespace+"/"+current.Name, current.ResourceVersion, &metav1.ObjectMeta{ResourceVersion: updated.ResourceVersion})
	}
	return nil
}

// deleteEndpoints removes the Endpoints of a deleted Service. It is called even when the
// cache has no such Endpoints, because the cache may simply not have caught up with one being
// created.
func (c *Controller) deleteEndpoints(ctx context.Context, namespace, name string) error {
	err := c.client.CoreV1().Endpoints(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	c.triggers.forget(namespace, name)
	c.stale.Forget(namespace + "/" + name)
	return nil
}

// deleteEndpointsConfirmed is deleteEndpoints for a sharded controller, whose cache can miss a
// Service that exists (a watch restarted with another range, a selector the apiserver
// applied differently): the Service is read live, and only its NotFound deletes, the
// Endpoints read live and deleted with its UID as a precondition, so neither a Service
// still there nor an Endpoints recreated meanwhile is touched. A Service found live is the
// cache being behind: the error retries the key with backoff until the cache has it.
func (c *Controller) deleteEndpointsConfirmed(ctx context.Context, namespace, name string) error {
	_, err := c.client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return fmt.Errorf("service %s/%s is missing from this shard's cache but exists: not deleting its Endpoints", namespace, name)
	case !apierrors.IsNotFound(err):
		return err
	}
	ep, err := c.client.CoreV1().Endpoints(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		if _, lock := ep.Annotations[resourcelock.LeaderElectionRecordAnnotationKey]; lock {
			return nil // a leader-election lock, not a Service's: never ours
		}
		err = c.client.CoreV1().Endpoints(namespace).Delete(ctx, name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &ep.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	c.triggers.forget(namespace, name)
	c.stale.Forget(namespace + "/" + name)
	return nil
}
