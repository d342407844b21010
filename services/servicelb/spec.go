package servicelb

import (
	"context"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/informer"
)

// Spec describes the service-lb-controller binary to app.Main.
func Spec() app.Spec {
	return app.Spec{
		ID:          ControllerID,
		Usage:       "gives LoadBalancer Services addresses from IPAddressPools (lb.kcm-split.io), with upstream's service controller contract",
		DefaultPort: DefaultPort,
		// A new Service costs two writes and two Events: see DefaultQPS.
		DefaultQPS:   DefaultQPS,
		DefaultBurst: DefaultBurst,
		Flags:        flags(),
		Validate: func(c *cli.Context) error {
			return optionsFrom(c).Validate()
		},
		Run: run,
	}
}

// run is called only while this process holds the Lease.
func run(ctx context.Context, rt *app.Runtime) error {
	opts := optionsFrom(rt.CLI)
	dyn, err := dynamic.NewForConfig(rt.Config)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(rt.Client, rt.ResyncPeriod(), informers.WithTransform(informer.DropManagedFields))
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, rt.ResyncPeriod())
	served := poolAPIServed(ctx, rt.Config, crdWait)
	var pools cache.SharedIndexInformer
	if served {
		pools = dynFactory.ForResource(v1alpha1.GroupVersionResource).Informer()
	}
	c := New(
		factory.Core().V1().Services(),
		factory.Core().V1().Nodes(),
		factory.Core().V1().Namespaces(),
		pools,
		rt.Client,
		v1alpha1.NewClient(dyn),
		rt.EventRecorder(ctx, ComponentName),
		opts,
		rt.Registry,
	)
	rt.SetSynced(c.HasSynced)
	return informer.Run(ctx, func(ctx context.Context) error {
		// late watches for the CRD when it is not installed yet; it ends with ctx, before
		// the informers are shut down.
		var late sync.WaitGroup
		ctx, cancel := context.WithCancel(ctx)
		defer late.Wait()
		defer cancel()
		if !served {
			rt.Logger.Error(nil, "The IPAddressPool API is not served: install the CRD from charts/kcm-split/crds/. Until then no Service gets an address; cleanups still run.",
				"groupVersion", v1alpha1.GroupVersionResource.GroupVersion().String())
			late.Go(func() {
				if !poolAPIServed(ctx, rt.Config, 0) {
					return // ctx ended
				}
				rt.Logger.Info("The IPAddressPool API is now served; watching pools")
				inf := dynFactory.ForResource(v1alpha1.GroupVersionResource).Informer()
				if err := c.SetPoolInformer(inf); err != nil {
					utilruntime.HandleErrorWithContext(ctx, err, "Cannot watch IPAddressPools")
					return
				}
				dynFactory.Start(ctx.Done())
			})
		}
		return c.Run(ctx, opts.ConcurrentSyncs)
	}, factory, dynFactory)
}

// crdWait is how long the start waits for the IPAddressPool API before running without it:
// long enough for a CRD applied together with the controller to become established.
const crdWait = 10 * time.Second

// crdPoll is how often discovery is asked whether the CRD has been installed meanwhile.
const crdPoll = 10 * time.Second

// poolAPIServed polls discovery until the IPAddressPool resource is served (true), or until
// timeout has passed (0: until ctx ends) (false).
func poolAPIServed(ctx context.Context, cfg *rest.Config, timeout time.Duration) bool {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false
	}
	gv := v1alpha1.GroupVersionResource.GroupVersion().String()
	interval := time.Second
	if timeout == 0 {
		interval = crdPoll
	}
	poll := func(ctx context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			if !apierrors.IsNotFound(err) {
				klog.FromContext(ctx).V(2).Info("Asking for the IPAddressPool API", "err", err)
			}
			return false, nil
		}
		for _, r := range list.APIResources {
			if r.Name == v1alpha1.Resource {
				return true, nil
			}
		}
		return false, nil
	}
	if timeout == 0 {
		return wait.PollUntilContextCancel(ctx, interval, true, poll) == nil
	}
	return wait.PollUntilContextTimeout(ctx, interval, timeout, true, poll) == nil
}
