package endpoints

import (
	"context"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/informers"

	"github.com/kcm-split/kcm-split/shared/app"
)

// Spec describes the endpoints-controller binary to app.Main.
func Spec() app.Spec {
	return app.Spec{
		ID:          ControllerID,
		Usage:       "keeps the Endpoints of every Service with a selector in line with the Pods it selects",
		DefaultPort: DefaultPort,
		Flags:       flags(),
		Validate: func(c *cli.Context) error {
			return optionsFrom(c).Validate()
		},
		Run: run,
	}
}

// run is called only while this process holds the Lease: it owns the informers, so a standby
// replica watches nothing.
func run(ctx context.Context, rt *app.Runtime) error {
	opts := optionsFrom(rt.CLI)
	recorder := rt.EventRecorder(ctx, ComponentName)
	client := rt.Client

	// The informers stop with this context. It also ends when Run returns early with an
	// error, without which factory.Shutdown below would wait forever.
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, rt.ResyncPeriod(), informers.WithTransform(cacheTransform))
	c := New(
		factory.Core().V1().Pods(),
		factory.Core().V1().Services(),
		factory.Core().V1().Endpoints(),
		client,
		recorder,
		opts,
		rt.Registry,
	)
	factory.Start(ctx.Done())
	// Wait for the informers' goroutines, so that the Lease is released only once nothing
	// is left running.
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	rt.SetSynced(c.HasSynced)
	return c.Run(ctx, opts.ConcurrentSyncs)
}
