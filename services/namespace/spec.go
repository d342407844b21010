package namespace

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/featuregate"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/foreign"
)

// Spec describes the namespace-controller binary to app.Main.
func Spec() app.Spec {
	return app.WithOptions(app.Spec{
		ID:          ControllerID,
		Usage:       "deletes everything in a deleted namespace, Pods first, then finalizes it",
		DefaultPort: DefaultPort,
		// a namespace's Pods are deleted before its other content; locked on.
		FeatureGates: []featuregate.Feature{features.OrderedNamespaceDeletion},
		// Many small calls per namespace: see DefaultQPS.
		DefaultQPS:   DefaultQPS,
		DefaultBurst: DefaultBurst,
		// The foreign-writer counter, at 0 before any term.
		ProcessMetrics: func(reg prometheus.Registerer) { foreign.Register(reg, Name) },
	}, DefaultOptions(), run)
}

// Resources whose changes can change discovery.
var (
	apiServicesResource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	crdsResource        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// run is called only while this process holds the Lease: it owns the informers, so a standby
// replica watches nothing.
func run(ctx context.Context, rt *app.Runtime, opts Options) error {
	client := rt.Client
	meta, err := metadata.NewForConfig(rt.Config)
	if err != nil {
		return fmt.Errorf("building metadata client: %w", err)
	}
	recorder := rt.EventRecorder(ctx, Name)

	// Namespaces are cached without managedFields (an Update sent without them keeps the
	// stored ones); the foreign-writer detector reads them first.
	fw := newForeignWriters(ctx, rt)
	factory := informers.NewSharedInformerFactoryWithOptions(client, rt.ResyncPeriod(), informers.WithTransform(fw.transform))
	c := New(
		factory.Core().V1().Namespaces(),
		client,
		metadataContent{meta},
		// Every group version reached, cluster-scoped resources and empty versions
		// included: the memory of last good discoveries needs to know a version answered
		// even when it serves nothing namespaced. The controller keeps the namespaced ones.
		// The package function, as upstream's namespaced variant: one attempt, no retries.
		func() ([]*metav1.APIResourceList, error) {
			return discovery.ServerPreferredResources(client.Discovery())
		},
		recorder,
		opts,
		rt.Registry,
	)
	c.foreign = fw
	if opts.AllowDeletionWithUnavailableGroups > 0 {
		// The memory of last good discoveries outlives this term: kept beside the Lease,
		// written only by its holder (rt.Client is fenced). Upstream's default (no flag)
		// neither reads nor writes it.
		c.keepDiscoveryIn(client.CoreV1().ConfigMaps(rt.LeaseNamespace), rt.LeaseName+DiscoveryStoreSuffix)
	}
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
			return fmt.Errorf("watching %s: %w", gvr.Resource, err)
		}
	}
	return rt.RunControllers(ctx, []app.Controller{{Name: Name, HasSynced: c.HasSynced,
		Run: func(ctx context.Context) error { return c.Run(ctx, opts.ConcurrentSyncs) }}}, factory, watched)
}
