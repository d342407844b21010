package endpointscontroller

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/endpoints/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/projection"
	"github.com/kcm-split/kcm-split/services/endpoints/mirroring"
	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/foreign"
)

// Spec describes the endpoints-controller binary to app.Main.
func Spec() app.Spec {
	spec := app.WithOptions(app.Spec{
		ID:          ControllerID,
		Usage:       "keeps the Endpoints and EndpointSlices of every Service with a selector in line with the Pods it selects, and mirrors the custom Endpoints of Services without one into EndpointSlices",
		DefaultPort: DefaultPort,
		// trafficDistribution PreferSameZone/PreferSameNode hints (EndpointSlices); locked on.
		FeatureGates: []featuregate.Feature{features.PreferSameTrafficDistribution},
		// Three upstream controllers' budgets in one: see DefaultQPS.
		DefaultQPS:   DefaultQPS,
		DefaultBurst: DefaultBurst,
		// --shards: Services select Pods of their own namespace only.
		Sharded: true,
	}, DefaultOptions(), run)
	opts := spec.Options.(*Options)
	spec.ProcessMetrics = func(reg prometheus.Registerer) {
		// The foreign-writer counter of each enabled controller, at 0 before any term.
		enabled, _ := opts.Enabled() // validated at parse time already
		var names []string
		for _, name := range []string{endpoints.Name, endpointslice.Name, mirroring.Name} {
			if enabled[name] {
				names = append(names, name)
			}
		}
		foreign.Register(reg, names...)
	}
	return spec
}

// run is called only while this process holds the Lease: it owns the informers, so a standby
// replica watches nothing. The controllers --controllers enables share one informer per type,
// every object through one projection (internal/projection), each controller with its own
// queue and workers.
func run(ctx context.Context, rt *app.Runtime, opts Options) error {
	enabled, err := opts.Enabled()
	if err != nil {
		return err // validated at parse time already
	}
	proj := projection.New()
	factory := informers.NewSharedInformerFactoryWithOptions(rt.Client, rt.ResyncPeriod(), informers.WithTransform(proj.Transform))
	// One EndpointSlice informer for both slice controllers, holding the slices of whichever
	// of them run; each lists only its own by label.
	var managedBy []string
	if enabled[endpointslice.Name] {
		managedBy = append(managedBy, endpointslice.ManagedBy)
	}
	if enabled[mirroring.Name] {
		managedBy = append(managedBy, mirroring.ManagedBy)
	}
	if rt.ShardView != nil {
		shardInformers(factory, rt.Client, rt.ShardView, enabled, managedBy)
		opts.Endpoints.Shard, opts.EndpointSlice.Shard, opts.Mirroring.Shard = rt.Shard, rt.Shard, rt.Shard
	}
	var controllers []app.Controller
	if enabled[endpoints.Name] {
		c := endpoints.New(
			factory.Core().V1().Pods(),
			factory.Core().V1().Services(),
			factory.Core().V1().Endpoints(),
			rt.Client,
			rt.EventRecorder(ctx, endpoints.ComponentName),
			opts.Endpoints,
			rt.Registry,
		)
		controllers = append(controllers, app.Controller{Name: endpoints.Name, HasSynced: c.HasSynced,
			Run: func(ctx context.Context) error { return c.Run(ctx, opts.Endpoints.ConcurrentSyncs) }})
	}
	if enabled[endpointslice.Name] {
		c := endpointslice.New(
			factory.Core().V1().Pods(),
			factory.Core().V1().Services(),
			managedSlices(factory, managedBy),
			factory.Core().V1().Nodes(),
			rt.Client,
			rt.EventRecorder(ctx, endpointslice.ComponentName),
			opts.EndpointSlice,
			rt.Features.Enabled(features.PreferSameTrafficDistribution),
			rt.Registry,
		)
		controllers = append(controllers, app.Controller{Name: endpointslice.Name, HasSynced: c.HasSynced,
			Run: func(ctx context.Context) error { return c.Run(ctx, opts.EndpointSlice.ConcurrentSyncs) }})
	}
	if enabled[mirroring.Name] {
		c := mirroring.New(
			factory.Core().V1().Endpoints(),
			factory.Core().V1().Services(),
			managedSlices(factory, managedBy),
			rt.Client,
			rt.EventRecorder(ctx, mirroring.ComponentName),
			opts.Mirroring,
			rt.Registry,
		)
		controllers = append(controllers, app.Controller{Name: mirroring.Name, HasSynced: c.HasSynced,
			Run: func(ctx context.Context) error { return c.Run(ctx, opts.Mirroring.ConcurrentSyncs) }})
	}
	watchForeignWriters(ctx, rt, factory, proj, enabled, managedBy)
	klog.FromContext(ctx).Info("Controllers enabled", "endpoints", enabled[endpoints.Name],
		"endpointSlices", enabled[endpointslice.Name], "endpointSliceMirroring", enabled[mirroring.Name])
	return rt.RunControllers(ctx, controllers, factory)
}

// managedSlices is the factory's EndpointSlice informer, watching only the slices whose
// managed-by label is one of managedBy, as the API server filters them: slices written by
// meshes and other controllers never enter the cache. The factory keeps one informer per
// type, so every call returns the same informer: the one of the first call's selector.
func managedSlices(factory informers.SharedInformerFactory, managedBy []string) discoveryinformers.EndpointSliceInformer {
	return discoveryinformers.New(factory, metav1.NamespaceAll, managedBySelector(managedBy)).EndpointSlices()
}

// managedBySelector sets the label selector of managedSlices.
func managedBySelector(managedBy []string) func(*metav1.ListOptions) {
	req, err := labels.NewRequirement(discovery.LabelManagedBy, selection.In, managedBy)
	if err != nil {
		// Fixed, valid values; refusing them would be a programming error.
		panic(fmt.Sprintf("managed-by selector for %v: %v", managedBy, err))
	}
	selector := labels.NewSelector().Add(*req).String()
	return func(o *metav1.ListOptions) { o.LabelSelector = selector }
}
