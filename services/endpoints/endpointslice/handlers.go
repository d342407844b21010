package endpointslice

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	endpointslicerec "k8s.io/endpointslice"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/podservices"
)

// The controller's event handlers: thin, as the Endpoints controller's, and
// deciding from the library's tracker whether a slice event is news.

func (c *Controller) enqueueService(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleErrorWithContext(context.Background(), err, "Cannot get key of object", "object", obj)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) onPodAddOrDelete(obj any) {
	if pod := podservices.PodFrom(obj); pod != nil {
		c.enqueuePodServices(podservices.Selecting(c.selectors, pod.Namespace, pod.Labels))
	}
}

// enqueuePodServices queues Services after a Pod change, delayed by the batch period.
func (c *Controller) enqueuePodServices(keys map[string]struct{}) {
	for k := range keys {
		c.queue.AddAfter(k, c.opts.BatchPeriod)
	}
}

// onSliceAdd queues the Service of a slice the tracker does not expect at this version:
// one someone else created, or one of ours it has not seen written.
func (c *Controller) onSliceAdd(obj any) {
	slice, ok := obj.(*discovery.EndpointSlice)
	if !ok {
		utilruntime.HandleErrorWithContext(context.Background(), nil, "Unexpected object in EndpointSlice notification", "type", fmt.Sprintf("%T", obj))
		return
	}
	if c.reconciler.ManagedByController(slice) && c.tracker.ShouldSync(slice) {
		c.enqueueServiceOf(slice)
	}
}

// onSliceUpdate queues the Service of a slice changed by someone else, and both Services
// when the service-name label was edited (a generation does not change with labels).
func (c *Controller) onSliceUpdate(oldObj, newObj any) {
	old, okOld := oldObj.(*discovery.EndpointSlice)
	cur, okCur := newObj.(*discovery.EndpointSlice)
	if !okOld || !okCur {
		utilruntime.HandleErrorWithContext(context.Background(), nil, "Unexpected object in EndpointSlice notification", "type", fmt.Sprintf("%T", newObj))
		return
	}
	if old.Labels[discovery.LabelServiceName] != cur.Labels[discovery.LabelServiceName] {
		c.enqueueServiceOf(cur)
		c.enqueueServiceOf(old)
		return
	}
	if c.reconciler.ManagedByChanged(old, cur) || (c.reconciler.ManagedByController(cur) && c.tracker.ShouldSync(cur)) {
		c.enqueueServiceOf(cur)
	}
}

// onSliceDelete queues the Service of a slice deleted without this controller asking for
// it. A slice whose managed-by label was changed away also ends here: the informer watches
// only this controller's slices.
func (c *Controller) onSliceDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	slice, ok := obj.(*discovery.EndpointSlice)
	if !ok {
		utilruntime.HandleErrorWithContext(context.Background(), nil, "Unexpected object in EndpointSlice notification", "type", fmt.Sprintf("%T", obj))
		return
	}
	if c.reconciler.ManagedByController(slice) && c.tracker.Has(slice) && !c.tracker.HandleDeletion(slice) {
		c.enqueueServiceOf(slice)
	}
}

// enqueueServiceOf queues a slice's Service after at least changeMinDelay, or the batch
// period if longer.
func (c *Controller) enqueueServiceOf(slice *discovery.EndpointSlice) {
	key, err := endpointslicerec.ServiceControllerKey(slice)
	if err != nil {
		utilruntime.HandleErrorWithContext(context.Background(), err, "Cannot get Service of EndpointSlice", "endpointSlice", slice.Namespace+"/"+slice.Name)
		return
	}
	c.queue.AddAfter(key, max(changeMinDelay, c.opts.BatchPeriod))
}

// onNodeUpdate recomputes topology when a Node's readiness or zone changed: the zone label
// may be set by a cloud provider after the Node registered.
func (c *Controller) onNodeUpdate(oldObj, newObj any) {
	old, okOld := oldObj.(*v1.Node)
	cur, okCur := newObj.(*v1.Node)
	if !okOld || !okCur {
		return
	}
	if nodeReady(old) != nodeReady(cur) || old.Labels[v1.LabelTopologyZone] != cur.Labels[v1.LabelTopologyZone] {
		c.topology.Add(topologyKey)
	}
}

func nodeReady(n *v1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == v1.NodeReady {
			return cond.Status == v1.ConditionTrue
		}
	}
	return false
}
