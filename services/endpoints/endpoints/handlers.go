package endpoints

import (
	"context"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/podservices"
)

// Event handlers stay thin: they turn an object into the Service keys it affects and queue
// them. A Service and its Endpoints share namespace and name, so both map to one key.

// enqueue queues the key of a Service or Endpoints, tombstones included.
func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleErrorWithContext(context.Background(), err, "Cannot get key of object", "object", obj)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) onPodAdd(obj any) {
	if pod := podservices.PodFrom(obj); pod != nil {
		c.enqueuePodServices(c.servicesSelecting(pod.Namespace, pod.Labels))
	}
}

func (c *Controller) onPodDelete(obj any) {
	if pod := podservices.PodFrom(obj); pod != nil {
		c.enqueuePodServices(c.servicesSelecting(pod.Namespace, pod.Labels))
	}
}

func (c *Controller) onPodUpdate(oldObj, newObj any) {
	c.enqueuePodServices(podservices.ForUpdate(c.selectors, oldObj, newObj))
}

// enqueuePodServices queues Services after a Pod change, delayed by the batch period so
// that a burst of Pod changes becomes one sync per Service.
func (c *Controller) enqueuePodServices(keys map[string]struct{}) {
	for k := range keys {
		c.queue.AddAfter(k, c.opts.BatchPeriod)
	}
}

// servicesSelecting returns the keys of the Services whose Endpoints a Pod with podLabels
// in namespace belongs to.
func (c *Controller) servicesSelecting(namespace string, podLabels map[string]string) map[string]struct{} {
	return podservices.Selecting(c.selectors, namespace, podLabels)
}
