package quota

import (
	"context"
	"fmt"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"

	"k8s.io/component-base/featuregate"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/informer"
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
	// update without managed fields leaves the stored ones alone.
	factory := informers.NewSharedInformerFactoryWithOptions(rt.Client, 0, informers.WithTransform(informer.DropManagedFields))
	c := New(
		factory.Core().V1().ResourceQuotas(),
		rt.Client,
		meta,
		discoverWith(disc),
		rt.EventRecorder(ctx, ComponentName),
		opts,
		rt.Registry,
	)
	return rt.RunControllers(ctx, []app.Controller{{Name: ComponentName, HasSynced: c.HasSynced, Run: c.Run}}, factory)
}
