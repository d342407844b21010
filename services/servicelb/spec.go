package servicelb

import (
	"context"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/shared/app"
)

// Spec describes the service-lb-controller binary to app.Main.
func Spec() app.Spec {
	return app.Spec{
		ID:          ControllerID,
		Usage:       "gives LoadBalancer Services addresses from IPAddressPools (lb.kcm-split.io), with upstream's service controller contract",
		DefaultPort: DefaultPort,
		Flags:       flags(),
		Validate: func(c *cli.Context) error {
			return optionsFrom(c).Validate()
		},
		Run: run,
	}
}

// run is called only while this process holds the Lease.
func run(ctx context.Context, rt *app.Runtime) error {
	opts := optionsFrom(rt.CLI)
	cfg := rt.Config
	if !rt.CLI.IsSet(app.FlagQPS) && !rt.CLI.IsSet(app.FlagBurst) {
		cfg = rest.CopyConfig(rt.Config)
		cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
		rt.Logger.V(1).Info("Using the controller's default client budget", "qps", cfg.QPS, "burst", cfg.Burst)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	recorder := eventRecorder(ctx, client)

	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, rt.ResyncPeriod(), informers.WithTransform(dropManagedFields))
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, rt.ResyncPeriod())
	served := poolAPIServed(ctx, cfg, crdWait)
	var pools cache.SharedIndexInformer
	if served {
		pools = dynFactory.ForResource(v1alpha1.GroupVersionResource).Informer()
	}
	c := New(
		factory.Core().V1().Services(),
		factory.Core().V1().Nodes(),
		factory.Core().V1().Namespaces(),
		pools,
		client,
		v1alpha1.NewClient(dyn),
		recorder,
		opts,
		rt.Registry,
	)
	factory.Start(ctx.Done())
	dynFactory.Start(ctx.Done())
	// late watches for the CRD when it is not installed yet.
	var late sync.WaitGroup
	defer func() {
		cancel()
		late.Wait()
		factory.Shutdown()
		dynFactory.Shutdown()
	}()
	if !served {
		rt.Logger.Error(nil, "The IPAddressPool API is not served: install the CRD from charts/kcm-split/crds/. Until then no Service gets an address; cleanups still run.",
			"groupVersion", v1alpha1.GroupVersionResource.GroupVersion().String())
		late.Go(func() {
			if !poolAPIServed(ctx, cfg, 0) {
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
	rt.SetSynced(c.HasSynced)
	return c.Run(ctx, opts.ConcurrentSyncs)
}

// eventRecorder writes Events through client, so they share the controller's own budget:
// a new Service costs two Events, and on the shared default of 20 QPS a burst of Services
// would leave its Events (and `kubectl describe`) tens of seconds behind the status.
func eventRecorder(ctx context.Context, client kubernetes.Interface) record.EventRecorder {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartStructuredLogging(3)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	context.AfterFunc(ctx, b.Shutdown)
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: ComponentName})
}

// dropManagedFields keeps managed fields out of the informer caches: nothing here reads them,
// and on thousands of Services and Nodes they are much of the memory.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
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
