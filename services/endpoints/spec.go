package endpoints

import (
	"context"

	"k8s.io/client-go/informers"

	"github.com/kcm-split/kcm-split/shared/app"
)

// Spec describes the endpoints-controller binary to app.Main.
func Spec() app.Spec {
	return app.WithOptions(app.Spec{
		ID:          ControllerID,
		Usage:       "keeps the Endpoints of every Service with a selector in line with the Pods it selects",
		DefaultPort: DefaultPort,
	}, DefaultOptions(), run)
}

// run is called only while this process holds the Lease: it owns the informers, so a standby
// replica watches nothing.
func run(ctx context.Context, rt *app.Runtime, opts Options) error {
	factory := informers.NewSharedInformerFactoryWithOptions(rt.Client, rt.ResyncPeriod(), informers.WithTransform(cacheTransform))
	c := New(
		factory.Core().V1().Pods(),
		factory.Core().V1().Services(),
		factory.Core().V1().Endpoints(),
		rt.Client,
		rt.EventRecorder(ctx, ComponentName),
		opts,
		rt.Registry,
	)
	return rt.RunController(ctx, c.HasSynced, func(ctx context.Context) error { return c.Run(ctx, opts.ConcurrentSyncs) }, factory)
}
