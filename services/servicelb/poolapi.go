// Discovery of the IPAddressPool API: whether it is served now, waiting for it at start, and
// watching for it to appear or go for the life of the process.

package servicelb

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

// apiServedNow asks discovery once whether gvr is served. An error other than NotFound (the
// group is not there) means "cannot tell".
func apiServedNow(ctx context.Context, dc discovery.DiscoveryInterface, gvr schema.GroupVersionResource) (bool, error) {
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

// waitPoolAPI polls discovery every second until the API is served or timeout passes.
func waitPoolAPI(ctx context.Context, dc discovery.DiscoveryInterface, gvr schema.GroupVersionResource, timeout time.Duration) (bool, error) {
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := apiServedNow(ctx, dc, gvr)
		last = err
		return ok, nil
	})
	return err == nil, last
}

// watchPoolAPI asks discovery about the IPAddressPool API until ctx ends and calls changed
// when the answer differs from the last one (an unanswered question counts as "not
// served": the pools are then unknown, which keeps every address).
func watchPoolAPI(ctx context.Context, dc discovery.DiscoveryInterface, served bool, changed func(bool)) {
	watchAPI(ctx, dc, v1alpha1.GroupVersionResource, served, changed)
}

// watchAPI is watchPoolAPI for any resource gvr.
func watchAPI(ctx context.Context, dc discovery.DiscoveryInterface, gvr schema.GroupVersionResource, served bool, changed func(bool)) {
	delay := poolAPIRecheck
	if !served {
		delay = poolAPIRetryMin
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		now, err := apiServedNow(ctx, dc, gvr)
		if ctx.Err() != nil {
			return
		}
		if now != served {
			served = now
			changed(now)
			delay = poolAPIRetryMin
			continue
		}
		if err != nil || !served {
			delay = min(2*delay, poolAPIRecheck)
			continue
		}
		delay = poolAPIRecheck
	}
}

// crdWait is how long the start waits for the IPAddressPool API before running without it:
// long enough for a CRD applied together with the controller to become established.
const crdWait = 10 * time.Second

// Discovery of the IPAddressPool API after the start: every poolAPIRecheck while the answer
// stays the same; after a change or an error, from poolAPIRetryMin doubling up to
// poolAPIRecheck, so an API that appears (or returns) is picked up within seconds without
// asking discovery every second forever.
const (
	poolAPIRetryMin = time.Second
	poolAPIRecheck  = 30 * time.Second
)
