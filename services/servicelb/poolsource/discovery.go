// Discovery of a pool API: whether it is served now, waiting for it at start, and watching
// for it to appear or go for the life of the process.

package poolsource

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
)

// ServedNow asks discovery once whether gvr is served. An error other than NotFound (the
// group is not there) means "cannot tell".
func ServedNow(ctx context.Context, dc discovery.DiscoveryInterface, gvr schema.GroupVersionResource) (bool, error) {
	list, err := dc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Asking for a pool API", "groupVersion", gvr.GroupVersion().String(), "err", err)
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// WaitServed polls discovery every second until gvr is served or timeout passes.
func WaitServed(ctx context.Context, dc discovery.DiscoveryInterface, gvr schema.GroupVersionResource, timeout time.Duration) (bool, error) {
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := ServedNow(ctx, dc, gvr)
		last = err
		return ok, nil
	})
	return err == nil, last
}

// Discovery of a pool API after the start: every recheck while the answer stays the same;
// after a change or an error, from retryMin doubling up to recheck, so an API that appears
// (or returns) is picked up within seconds without asking discovery every second forever.
const (
	retryMin = time.Second
	recheck  = 30 * time.Second
)

// Watch asks discovery about gvr until ctx ends and calls changed when the answer differs
// from the last one, starting from served (an unanswered question counts as "not served":
// the pools are then unknown, which keeps every address).
func Watch(ctx context.Context, dc discovery.DiscoveryInterface, gvr schema.GroupVersionResource, served bool, changed func(bool)) {
	delay := recheck
	if !served {
		delay = retryMin
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		now, err := ServedNow(ctx, dc, gvr)
		if ctx.Err() != nil {
			return
		}
		if now != served {
			served = now
			changed(now)
			delay = retryMin
			continue
		}
		if err != nil || !served {
			delay = min(2*delay, recheck)
			continue
		}
		delay = recheck
	}
}
