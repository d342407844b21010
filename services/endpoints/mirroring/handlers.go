package mirroring

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
)

// The mirroring controller's event handlers. An Endpoints and its Service share namespace
// and name, which is the queue key.

// onEndpoints queues an added or deleted Endpoints that may be mirrored.
func (c *Controller) onEndpoints(obj any) {
	if ep := endpointsFrom(obj); ep != nil && shouldMirror(ep) && !c.ownedBySelector(ep) {
		c.enqueue(ep)
	}
}

// onEndpointsUpdate queues an Endpoints that may be mirrored now or could be before: a
// skip-mirror label added means its slices go.
func (c *Controller) onEndpointsUpdate(oldObj, newObj any) {
	old, cur := endpointsFrom(oldObj), endpointsFrom(newObj)
	if old == nil || cur == nil || (!shouldMirror(old) && !shouldMirror(cur)) || c.ownedBySelector(cur) {
		return
	}
	c.enqueue(cur)
}

// ownedBySelector reports an Endpoints whose Service, as cached, has a selector: the
// endpoints controller writes it, and it is never mirrored. A Service losing or gaining its
// selector is queued by the Service handlers, so nothing is missed by skipping these.
func (c *Controller) ownedBySelector(ep *v1.Endpoints) bool {
	svc, err := c.services.Services(ep.Namespace).Get(ep.Name)
	return err == nil && svc.Spec.Selector != nil
}

func (c *Controller) onServiceAddOrDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if svc, ok := obj.(*v1.Service); ok && svc.Spec.Selector == nil {
		c.enqueue(svc)
	}
}

// onServiceUpdate queues a Service whose selector appeared or went: its Endpoints are
// mirrored from now on, or no longer.
func (c *Controller) onServiceUpdate(oldObj, newObj any) {
	old, okOld := oldObj.(*v1.Service)
	cur, okCur := newObj.(*v1.Service)
	if okOld && okCur && (old.Spec.Selector == nil) != (cur.Spec.Selector == nil) {
		c.enqueue(cur)
	}
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleErrorWithContext(context.Background(), err, "Cannot get key of object", "object", obj)
		return
	}
	c.queue.Add(key)
}

// onSliceAdd queues the Endpoints of a mirrored slice the tracker does not expect at this
// version: one someone else created or changed, or one of ours not yet seen written.
func (c *Controller) onSliceAdd(obj any) {
	if s := sliceFrom(obj); s != nil && mirrored(s) && c.tracker.ShouldSync(s) {
		c.enqueueEndpointsOf(s)
	}
}

// onSliceUpdate queues the Endpoints of a mirrored slice someone else changed, of a slice
// whose managed-by label moved to or from this controller, and both Endpoints when the
// service-name label was edited.
func (c *Controller) onSliceUpdate(oldObj, newObj any) {
	old, cur := sliceFrom(oldObj), sliceFrom(newObj)
	if old == nil || cur == nil {
		return
	}
	if old.Labels[discovery.LabelServiceName] != cur.Labels[discovery.LabelServiceName] {
		if mirrored(old) || mirrored(cur) {
			c.enqueueEndpointsOf(cur)
			c.enqueueEndpointsOf(old)
		}
		return
	}
	if mirrored(old) != mirrored(cur) || (mirrored(cur) && c.tracker.ShouldSync(cur)) {
		c.enqueueEndpointsOf(cur)
	}
}

// onSliceDelete queues the Endpoints of a mirrored slice deleted without this controller
// asking. A slice relabelled out of the informer's selector arrives here too, with its last
// labels, still this controller's.
func (c *Controller) onSliceDelete(obj any) {
	if s := sliceFrom(obj); s != nil && mirrored(s) && c.tracker.Has(s) && !c.tracker.HandleDeletion(s) {
		c.enqueueEndpointsOf(s)
	}
}

// enqueueEndpointsOf queues the Endpoints a slice mirrors, after the batch period.
func (c *Controller) enqueueEndpointsOf(s *discovery.EndpointSlice) {
	name := s.Labels[discovery.LabelServiceName]
	if name == "" {
		return
	}
	c.queue.AddAfter(s.Namespace+"/"+name, c.opts.BatchPeriod)
}

func mirrored(s *discovery.EndpointSlice) bool {
	return s.Labels[discovery.LabelManagedBy] == ManagedBy
}

func sliceFrom(obj any) *discovery.EndpointSlice {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(*discovery.EndpointSlice)
	if !ok {
		utilruntime.HandleErrorWithContext(context.Background(), nil, "Unexpected object in EndpointSlice notification", "type", fmt.Sprintf("%T", obj))
		return nil
	}
	return s
}

func endpointsFrom(obj any) *v1.Endpoints {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	ep, ok := obj.(*v1.Endpoints)
	if !ok {
		utilruntime.HandleErrorWithContext(context.Background(), nil, "Unexpected object in Endpoints notification", "type", fmt.Sprintf("%T", obj))
		return nil
	}
	return ep
}
