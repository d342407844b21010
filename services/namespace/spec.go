package namespace

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/app"
)

// Spec describes the namespace-controller binary to app.Main.
func Spec() app.Spec {
	return app.Spec{
		ID:          ControllerID,
		Usage:       "deletes everything in a deleted namespace, Pods first, then finalizes it",
		DefaultPort: DefaultPort,
		Flags:       flags(),
		Validate: func(c *cli.Context) error {
			return optionsFrom(c).Validate()
		},
		Run: run,
	}
}

// Resources whose changes can change discovery.
var (
	apiServicesResource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	crdsResource        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// run is called only while this process holds the Lease: it owns the informers, so a standby
// replica watches nothing.
func run(ctx context.Context, rt *app.Runtime) error {
	opts := optionsFrom(rt.CLI)
	cfg := rest.CopyConfig(rt.Config)
	cfg.QPS *= qpsFactor
	cfg.Burst *= burstFactor
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building metadata client: %w", err)
	}
	recorder := rt.EventRecorder(ctx, ComponentName)

	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, rt.ResyncPeriod())
	c := New(
		factory.Core().V1().Namespaces(),
		client,
		metadataContent{meta},
		client.Discovery().ServerPreferredNamespacedResources,
		recorder,
		opts,
		rt.Registry,
	)
	// APIServices and CRDs are watched (metadata only) to notice at once when discovery
	// changes: a failing aggregated API fixed or removed unblocks its namespaces without
	// waiting for the retry backoff. Best effort: they are not part of readiness, and
	// without permission to watch them the controller still works, only slower to notice.
	watched := metadatainformer.NewSharedInformerFactory(meta, 0)
	onAPIService := func(any) { c.enqueueBlockedByDiscovery() }
	onCRD := func(any) { c.resources.invalidate() }
	for gvr, fn := range map[schema.GroupVersionResource]func(any){apiServicesResource: onAPIService, crdsResource: onCRD} {
		_, err := watched.ForResource(gvr).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    fn,
			UpdateFunc: func(_, obj any) { fn(obj) },
			DeleteFunc: fn,
		})
		if err != nil {
			cancel()
			return fmt.Errorf("watching %s: %w", gvr.Resource, err)
		}
	}
	factory.Start(ctx.Done())
	watched.Start(ctx.Done())
	// Wait for the informers' goroutines, so that the Lease is released only once nothing
	// is left running.
	defer func() {
		cancel()
		factory.Shutdown()
		watched.Shutdown()
	}()
	rt.SetSynced(c.HasSynced)
	return c.Run(ctx, opts.ConcurrentSyncs)
}
