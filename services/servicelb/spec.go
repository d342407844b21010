package servicelb

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/informer"
)

// Spec describes the service-lb-controller binary to app.Main.
func Spec() app.Spec {
	return app.WithOptions(app.Spec{
		ID:          ControllerID,
		Usage:       "gives LoadBalancer Services addresses from IPAddressPools (lb.kcm-split.io), with upstream's service controller contract",
		DefaultPort: DefaultPort,
		// A new Service costs two writes and two Events: see DefaultQPS.
		DefaultQPS:   DefaultQPS,
		DefaultBurst: DefaultBurst,
	}, DefaultOptions(), run)
}

// crdWait is how long the start waits for a pool API before running without it: long
// enough for a CRD applied together with the controller to become established.
const crdWait = 10 * time.Second

// run is called only while this process holds the Lease.
func run(ctx context.Context, rt *app.Runtime, opts Options) error {
	dyn, err := dynamic.NewForConfig(rt.Config)
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rt.Config)
	if err != nil {
		return err
	}
	sources, err := opts.poolSources(dyn)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(rt.Client, rt.ResyncPeriod(), informers.WithTransform(cacheTransform))
	// Only our own claims: the cluster's ClusterIP IPAddresses are none of our business.
	claimFactory := informers.NewSharedInformerFactoryWithOptions(rt.Client, rt.ResyncPeriod(),
		informers.WithTransform(informer.DropManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = claimSelector().String() }))
	c := New(
		factory.Core().V1().Services(),
		factory.Core().V1().Nodes(),
		factory.Core().V1().Namespaces(),
		claimFactory.Networking().V1().IPAddresses(),
		rt.Client,
		rt.EventRecorder(ctx, ComponentName),
		opts,
		rt.Registry,
		sources...,
	)
	// Overwrite episodes in progress outlive the term: the next Lease holder goes on with
	// their backoff. Read here, before the informers start.
	if err := c.keepOverwritesBesideLease(ctx, rt.Client.CoreV1().ConfigMaps(rt.LeaseNamespace), rt.LeaseName); err != nil {
		rt.Logger.Error(err, "Status overwrite episodes are not kept for the next Lease holder")
	}
	factories := []informer.Factory{factory, claimFactory}
	var watches []*poolWatch
	for _, src := range sources {
		w, err := startPoolWatch(ctx, rt.Logger, dc, dyn, rt.ResyncPeriod(), c, src)
		if err != nil {
			return err
		}
		watches = append(watches, w)
		factories = append(factories, w.factory)
	}
	runController := func(ctx context.Context) error {
		// The discovery watches end with ctx, before the informers are shut down.
		var bg sync.WaitGroup
		ctx, cancel := context.WithCancel(ctx)
		defer bg.Wait()
		defer cancel()
		for _, w := range watches {
			bg.Go(func() { w.watch(ctx) })
		}
		return c.Run(ctx, opts.ConcurrentSyncs)
	}
	return rt.RunControllers(ctx, []app.Controller{{Name: ControllerID, HasSynced: c.HasSynced, Run: runController}}, factories...)
}

// poolSources are the pool APIs --pool-api enables, in its order; dyn reads them and writes
// their status.
func (o Options) poolSources(dyn dynamic.Interface) ([]poolsource.Source, error) {
	apis, err := o.PoolAPIs()
	if err != nil {
		return nil, err
	}
	var out []poolsource.Source
	for _, api := range apis {
		switch api {
		case poolsource.KCMSplit.Name:
			out = append(out, poolsource.NewKCMSplit(v1alpha1.NewClient(dyn)))
		case poolsource.MetalLB.Name:
			out = append(out, poolsource.NewMetalLB(dyn, o.MetalLBNamespace))
		}
	}
	return out, nil
}

// poolWatch follows one pool API in discovery for the controller: it hands the controller
// the API's informer once the API is served, and tells it when the API goes and comes back.
type poolWatch struct {
	c       *Controller
	src     poolsource.Source
	logger  logr.Logger
	dc      discovery.DiscoveryInterface
	factory dynamicinformer.DynamicSharedInformerFactory
	// served is the answer at the start; informer is nil until the API was served once.
	served   bool
	informer cache.SharedIndexInformer
}

// startPoolWatch waits up to crdWait for src's API and, when it is served, hands its
// informer to c. Each source has its own informer factory: the informer gets the source's
// transform, which must be set before it starts, and it may start later than the others.
func startPoolWatch(ctx context.Context, logger logr.Logger, dc discovery.DiscoveryInterface, dyn dynamic.Interface, resync time.Duration, c *Controller, src poolsource.Source) (*poolWatch, error) {
	w := &poolWatch{
		c: c, src: src, logger: logger, dc: dc,
		factory: dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, resync, src.Namespace(), nil),
	}
	w.served, _ = poolsource.WaitServed(ctx, dc, src.API().Resource, crdWait)
	if !w.served {
		return w, nil
	}
	inf, err := w.newInformer()
	if err != nil {
		return nil, err
	}
	w.informer = inf
	c.AddPoolInformer(src.API().Name, inf)
	return w, nil
}

func (w *poolWatch) newInformer() (cache.SharedIndexInformer, error) {
	inf := w.factory.ForResource(w.src.API().Resource).Informer()
	return inf, inf.SetTransform(w.src.Transform)
}

// watch asks discovery about the API until ctx ends (see poolsource.Watch).
func (w *poolWatch) watch(ctx context.Context) {
	api := w.src.API()
	if !w.served {
		w.logger.Error(nil, api.Title+" is not served: "+api.Install+". Until then no Service gets an address, addresses in Service status are kept, cleanups still run.",
			"groupVersion", api.Resource.GroupVersion().String())
	}
	poolsource.Watch(ctx, w.dc, api.Resource, w.served, func(served bool) { w.changed(ctx, served) })
}

// changed acts on the API going away, appearing for the first time, or coming back.
func (w *poolWatch) changed(ctx context.Context, served bool) {
	api := w.src.API()
	switch {
	case !served:
		w.logger.Error(nil, api.Title+" is no longer served (or discovery fails); keeping every address, handing out none")
		w.c.SetPoolAPIServed(api.Name, false)
	case w.informer == nil:
		w.logger.Info(api.Title + " is now served; watching its pools")
		inf, err := w.newInformer()
		if err == nil {
			err = w.c.SetPoolInformer(ctx, api.Name, inf)
		}
		if err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "Cannot watch pools", "api", api.Name)
			return
		}
		w.informer = inf
		w.factory.Start(ctx.Done())
	default:
		w.logger.Info(api.Title + " is served again")
		w.c.SetPoolAPIServed(api.Name, true)
	}
}
