package pvbinder

import (
	"context"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcm-split/kcm-split/shared/app"
)

// Spec describes the pv-binder-controller binary to app.Main.
func Spec() app.Spec {
	return app.Spec{
		ID:          ControllerID,
		Usage:       "binds PersistentVolumeClaims to PersistentVolumes and releases volumes whose claims are gone",
		DefaultPort: DefaultPort,
		Flags:       flags(),
		Validate: func(c *cli.Context) error {
			return optionsFrom(c).Validate()
		},
		Run: run,
	}
}

// run is called only while this process holds the Lease.
func run(ctx context.Context, rt *app.Runtime) error {
	opts := optionsFrom(rt.CLI)
	client, err := binderClient(rt)
	if err != nil {
		return err
	}
	recorder := rt.EventRecorder(ctx, ComponentName)

	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, rt.ResyncPeriod(), informers.WithTransform(dropManagedFields))
	c := New(
		factory.Core().V1().PersistentVolumes(),
		factory.Core().V1().PersistentVolumeClaims(),
		factory.Storage().V1().StorageClasses(),
		client,
		recorder,
		opts,
		rt.Registry,
	)
	factory.Start(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	rt.SetSynced(c.HasSynced)
	return c.Run(ctx, opts.Workers)
}

// binderClient is rt.Client, or, when the user set neither --kube-api-qps nor
// --kube-api-burst, a client with this binary's own budget (DefaultQPS, DefaultBurst).
func binderClient(rt *app.Runtime) (kubernetes.Interface, error) {
	if !ownBudget(rt.CLI) {
		return rt.Client, nil
	}
	cfg := rest.CopyConfig(rt.Config)
	cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	rt.Logger.V(1).Info("Using the binder's default client budget", "qps", cfg.QPS, "burst", cfg.Burst)
	return kubernetes.NewForConfig(cfg)
}

// ownBudget reports whether the binder should use its own default budget: the user set
// neither --kube-api-qps nor --kube-api-burst, on the command line or in the environment.
func ownBudget(c *cli.Context) bool {
	return !c.IsSet(app.FlagQPS) && !c.IsSet(app.FlagBurst)
}

// dropManagedFields keeps managed fields out of the informer caches: nothing here reads
// them, and on thousands of PVs and claims they are most of the memory.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
