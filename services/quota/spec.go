package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"

	"k8s.io/component-base/featuregate"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/leasestate"
)

// Spec describes the quota-controller binary to app.Main.
func Spec() app.Spec {
	return app.WithOptions(app.Spec{
		ID:          ControllerID,
		Usage:       "keeps the status (hard limits and observed usage) of every ResourceQuota up to date",
		DefaultPort: DefaultPort,
		// What a Pod is charged: see PodResources; what a ResourceClaim is: see Claims.
		FeatureGates: []featuregate.Feature{
			features.PodLevelResources, features.InPlacePodVerticalScaling,
			features.DynamicResourceAllocation, features.DRAExtendedResource,
		},
		// --shards: every object a quota counts is in the quota's namespace.
		Sharded: true,
		// The foreign-writer counter, at 0 before any term.
		ProcessMetrics: func(reg prometheus.Registerer) { foreign.Register(reg, Name) },
	}, DefaultOptions(), run)
}

// run is called only while this process holds the Lease: it owns the informers, so a standby
// replica watches nothing.
func run(ctx context.Context, rt *app.Runtime, opts Options) error {
	opts.PodResources = PodResources(rt.Features)
	opts.Claims = Claims(rt.Features)
	meta, err := metadata.NewForConfig(rt.Config)
	if err != nil {
		return fmt.Errorf("metadata client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(rt.Config)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}

	// Only managed fields are dropped from the quotas themselves: their status is written
	// back from the cached copy, and the status subresource keeps whatever metadata it is
	// sent (labels, annotations, owners, finalizers), so nothing else may be dropped. An
	// update without managed fields leaves the stored ones alone. They are read once, by the
	// foreign-writer detector, before they are dropped.
	transform, forget := foreignWriters(ctx, rt)
	factory := informers.NewSharedInformerFactoryWithOptions(rt.Client, 0, informers.WithTransform(transform))
	if rt.ShardView != nil {
		opts.View = rt.ShardView
		factory.InformerFor(&v1.ResourceQuota{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			return rt.ShardView.Informer("resourcequotas", &v1.ResourceQuota{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.CoreV1().ResourceQuotas("").List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return c.CoreV1().ResourceQuotas("").Watch(ctx, o)
				}, nil, resync, nil)
		})
	}
	if _, err := factory.Core().V1().ResourceQuotas().Informer().AddEventHandler(forget); err != nil {
		return fmt.Errorf("quota informer: %w", err)
	}
	c := New(
		factory.Core().V1().ResourceQuotas(),
		rt.Client,
		meta,
		discoverWith(disc),
		rt.EventRecorder(ctx, Name),
		opts,
		rt.Registry,
	)
	// The staleness clocks of quotas not counted in full outlive the term (store.go).
	clocks, err := leasestate.New(rt.Client.CoreV1().ConfigMaps(rt.LeaseNamespace), leasestate.Name(rt.LeaseName, StalenessStoreSuffix),
		leasestate.Options{Key: StalenessStoreKey, ManagedBy: ControllerID})
	if err != nil {
		return fmt.Errorf("staleness store: %w", err)
	}
	c.keepClocksIn(ctx, clocks)
	return rt.RunControllers(ctx, []app.Controller{{Name: Name, HasSynced: c.HasSynced, Run: c.Run}}, factory)
}
