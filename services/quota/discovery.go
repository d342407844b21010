package quota

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// DiscoverFunc returns the namespaced resource types the apiserver serves, each with the
// version to watch it in, and the API groups it could not discover, with the error. A partial
// result comes with a nil error and the failed groups filled in.
type DiscoverFunc func() (map[schema.GroupResource]string, map[string]string, error)

// startMonitorsAndDiscover runs the first discovery and starts the informers the quotas need;
// it reports false if ctx ended first. Discovery (a round trip) runs while the quotas list.
// The core types need no discovery, so their informers (Pods, the longest list) start as soon
// as the quotas say which are counted; the types only discovery can place follow once it has
// answered.
func (c *Controller) startMonitorsAndDiscover(ctx context.Context, wg *sync.WaitGroup) bool {
	discovered := make(chan struct{})
	wg.Go(func() {
		defer close(discovered)
		c.discoverServedTypes(ctx)
	})
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.handlers.Synced()...) {
		return false
	}
	c.startMonitors(ctx)
	select {
	case <-discovered:
	case <-ctx.Done():
		return false
	}
	c.startMonitors(ctx)
	return true
}

// startMonitors starts the informer of every type a quota tracks. It does not wait for them:
// a quota is synced as soon as every type it tracks has synced (or given up), so one slow or
// broken type never holds back the quotas that do not count it.
func (c *Controller) startMonitors(ctx context.Context) {
	all, err := c.quotas.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot list quotas")
		return
	}
	started := map[schema.GroupResource]bool{}
	for _, rq := range all {
		for gr := range namesByResource(rq.Spec.Hard, c.opts.Claims) {
			if !started[gr] {
				started[gr] = true
				c.monitors.getOrStart(gr)
			}
		}
	}
}

// discoveryLoop rediscovers every period, and early (at most every second) when asked.
func (c *Controller) discoveryLoop(ctx context.Context) {
	t := time.NewTicker(c.opts.DiscoveryPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.discoveryRequests:
		}
		c.rediscover(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// requestDiscovery asks the discovery loop for an early run; a request already pending
// covers this one.
func (c *Controller) requestDiscovery() {
	select {
	case c.discoveryRequests <- struct{}{}:
	default:
	}
}

// rediscover runs discovery and, if it answered, stops the informers no quota needs.
func (c *Controller) rediscover(ctx context.Context) {
	if c.discoverServedTypes(ctx) {
		c.stopUnneededMonitors(ctx)
	}
}

// discoverServedTypes asks discovery which version serves each type and reports whether it
// answered. It stops only the informers of types no longer served, never one for want of a
// quota: the first run overlaps the quotas' list, which may not be complete yet.
func (c *Controller) discoverServedTypes(ctx context.Context) bool {
	if c.discover == nil {
		return false
	}
	found, failed, err := c.discover()
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Discovery failed; counting the types found before")
		return false
	}
	if len(failed) > 0 {
		klog.FromContext(ctx).V(2).Info("Discovery of some API groups failed; their types keep the last version found", "groups", failed)
	}
	for _, gr := range c.monitors.setServed(found, failed) {
		c.enqueueTracking(gr)
	}
	return true
}

// stopUnneededMonitors stops the informers of types no quota tracks any longer; it runs with
// each discovery, so an informer outlives its last quota by at most a discovery period.
func (c *Controller) stopUnneededMonitors(ctx context.Context) {
	all, err := c.quotas.List(labels.Everything())
	if err != nil {
		return
	}
	needed := map[schema.GroupResource]bool{}
	for _, rq := range all {
		for gr := range namesByResource(rq.Spec.Hard, c.opts.Claims) {
			needed[gr] = true
		}
	}
	for _, gr := range c.monitors.stopAllBut(needed) {
		klog.FromContext(ctx).V(2).Info("Stopped the informer of a type no quota counts any longer", "resource", describeResource(gr))
	}
}

// discoverWith lists the namespaced types that can be listed and watched, each in its
// preferred version. Subresources and types quota never counts are left out.
func discoverWith(d discovery.DiscoveryInterface) DiscoverFunc {
	return func() (map[schema.GroupResource]string, map[string]string, error) {
		lists, err := d.ServerPreferredNamespacedResources()
		failed := map[string]string{}
		var groupErr *discovery.ErrGroupDiscoveryFailed
		switch {
		case err == nil:
		case errors.As(err, &groupErr):
			for gv, e := range groupErr.Groups {
				failed[gv.Group] = e.Error()
			}
		case len(lists) == 0:
			return nil, nil, err
		}
		found := map[schema.GroupResource]string{}
		for _, list := range lists {
			gv, perr := schema.ParseGroupVersion(list.GroupVersion)
			if perr != nil {
				continue
			}
			for _, r := range list.APIResources {
				if !quotable(gv.Group, r) {
					continue
				}
				found[schema.GroupResource{Group: gv.Group, Resource: r.Name}] = gv.Version
			}
		}
		return found, failed, nil
	}
}
