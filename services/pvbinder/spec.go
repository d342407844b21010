package pvbinder

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/informers"

	"k8s.io/component-base/featuregate"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/foreign"
)

// Spec describes the pv-binder-controller binary to app.Main.
func Spec() app.Spec {
	return app.WithOptions(app.Spec{
		ID:          ControllerID,
		Usage:       "binds PersistentVolumeClaims to PersistentVolumes and releases volumes whose claims are gone",
		DefaultPort: DefaultPort,
		// a claim binds only a volume of its attributes class; locked on.
		FeatureGates: []featuregate.Feature{features.VolumeAttributesClass},
		// A static bind costs five writes: see DefaultQPS.
		DefaultQPS:   DefaultQPS,
		DefaultBurst: DefaultBurst,
		// The foreign-writer counter, at 0 before any term.
		ProcessMetrics: func(reg prometheus.Registerer) { foreign.Register(reg, Name) },
	}, DefaultOptions(), run)
}

// run is called only while this process holds the Lease.
func run(ctx context.Context, rt *app.Runtime, opts Options) error {
	// Volumes and claims are shown to the foreign-writer detector before they are trimmed.
	fw := newForeignWriters(ctx, rt)
	factory := informers.NewSharedInformerFactoryWithOptions(rt.Client, rt.ResyncPeriod(), informers.WithTransform(fw.transform))
	// Read by the transform, which runs once the informers start.
	fw.volumes = factory.Core().V1().PersistentVolumes().Informer().GetStore()
	fw.claims = factory.Core().V1().PersistentVolumeClaims().Informer().GetStore()
	c := New(
		factory.Core().V1().PersistentVolumes(),
		factory.Core().V1().PersistentVolumeClaims(),
		factory.Storage().V1().StorageClasses(),
		factory.Core().V1().Pods(),
		rt.Client,
		rt.EventRecorder(ctx, ComponentName),
		opts,
		rt.Registry,
	)
	return rt.RunControllers(ctx, []app.Controller{{Name: Name, HasSynced: c.HasSynced,
		Run: func(ctx context.Context) error { return c.Run(ctx, opts.Workers) }}}, factory)
}
