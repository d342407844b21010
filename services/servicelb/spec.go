package servicelb

import (
	"context"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
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
	factory := informers.NewSharedInformerFactoryWithOptions(rt.Client, rt.ResyncPeriod(), informers.WithTransform(cacheTransform))
	// Only our own claims: the cluster's ClusterIP IPAddresses are none of our business.
	claimFactory := informers.NewSharedInformerFactoryWithOptions(rt.Client, rt.ResyncPeriod(),
		informers.WithTransform(informer.DropManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = claimSelector().String() }))
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, rt.ResyncPeriod())
	apis, err := opts.PoolAPIs()
	if err != nil {
		return err
	}
	own, metal := slices.Contains(apis, PoolAPIKCMSplit), slices.Contains(apis, PoolAPIMetalLB)
	served := false
	if own {
		served, _ = waitPoolAPI(ctx, dc, v1alpha1.GroupVersionResource, crdWait)
	}
	metalServed := false
	if metal {
		metalServed, _ = waitPoolAPI(ctx, dc, MetalLBGroupVersionResource, crdWait)
	}
	// The MetalLB pools have their own factory: its informer gets a transform, which must
	// be set before it starts, and it may start later than the others.
	metalFactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, rt.ResyncPeriod(), opts.MetalLBNamespace, nil)
	newMetalInformer := func() (cache.SharedIndexInformer, error) {
		inf := metalFactory.ForResource(MetalLBGroupVersionResource).Informer()
		return inf, inf.SetTransform(metalLBTransform)
	}
	var pools cache.SharedIndexInformer
	if own && served {
		pools = dynFactory.ForResource(v1alpha1.GroupVersionResource).Informer()
	}
	c := New(
		factory.Core().V1().Services(),
		factory.Core().V1().Nodes(),
		factory.Core().V1().Namespaces(),
		pools,
		claimFactory.Networking().V1().IPAddresses(),
		rt.Client,
		v1alpha1.NewClient(dyn),
		rt.EventRecorder(ctx, ComponentName),
		opts,
		rt.Registry,
	)
	var metalPools cache.SharedIndexInformer
	if metal && metalServed {
		if metalPools, err = newMetalInformer(); err != nil {
			return err
		}
		c.AddMetalLBInformer(metalPools, dyn, opts.MetalLBNamespace)
	}
	run := func(ctx context.Context) error {
		// The discovery watch ends with ctx, before the informers are shut down.
		var bg sync.WaitGroup
		ctx, cancel := context.WithCancel(ctx)
		defer bg.Wait()
		defer cancel()
		if metal {
			if !metalServed {
				rt.Logger.Error(nil, "MetalLB's IPAddressPool API is not served: install MetalLB's CRDs. Until then no Service gets an address, addresses in Service status are kept, cleanups still run.",
					"groupVersion", MetalLBGroupVersionResource.GroupVersion().String())
			}
			bg.Go(func() {
				watchAPI(ctx, dc, MetalLBGroupVersionResource, metalServed, func(served bool) {
					if !served {
						rt.Logger.Error(nil, "MetalLB's IPAddressPool API is no longer served (or discovery fails); keeping every address, handing out none")
						c.SetMetalLBAPIServed(false)
						return
					}
					if metalPools == nil {
						rt.Logger.Info("MetalLB's IPAddressPool API is now served; watching its pools")
						inf, err := newMetalInformer()
						if err == nil {
							err = c.SetMetalLBInformer(ctx, inf, dyn, opts.MetalLBNamespace)
						}
						if err != nil {
							utilruntime.HandleErrorWithContext(ctx, err, "Cannot watch MetalLB's IPAddressPools")
							return
						}
						metalPools = inf
						metalFactory.Start(ctx.Done())
						return
					}
					rt.Logger.Info("MetalLB's IPAddressPool API is served again")
					c.SetMetalLBAPIServed(true)
				})
			})
		}
		if !own {
			return c.Run(ctx, opts.ConcurrentSyncs)
		}
		if !served {
			rt.Logger.Error(nil, "The IPAddressPool API is not served: install the CRD from charts/kcm-split/crds/. Until then no Service gets an address, addresses in Service status are kept, cleanups still run.",
				"groupVersion", v1alpha1.GroupVersionResource.GroupVersion().String())
		}
		bg.Go(func() {
			watchPoolAPI(ctx, dc, served, func(served bool) {
				if !served {
					rt.Logger.Error(nil, "The IPAddressPool API is no longer served (or discovery fails); keeping every address, handing out none")
					c.SetPoolAPIServed(false)
					return
				}
				if pools == nil {
					rt.Logger.Info("The IPAddressPool API is now served; watching pools")
					pools = dynFactory.ForResource(v1alpha1.GroupVersionResource).Informer()
					if err := c.SetPoolInformer(pools); err != nil {
						utilruntime.HandleErrorWithContext(ctx, err, "Cannot watch IPAddressPools")
						return
					}
					dynFactory.Start(ctx.Done())
					return
				}
				rt.Logger.Info("The IPAddressPool API is served again")
				c.SetPoolAPIServed(true)
			})
		})
		return c.Run(ctx, opts.ConcurrentSyncs)
	}
	return rt.RunControllers(ctx, []app.Controller{{Name: ControllerID, HasSynced: c.HasSynced, Run: run}}, factory, claimFactory, dynFactory, metalFactory)
}
