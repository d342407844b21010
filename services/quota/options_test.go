package quota

import (
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/app/apptest"
)

func TestOptionsValidate(t *testing.T) {
	with := func(f func(*Options)) Options { return apptest.With(DefaultOptions(), f) }
	apptest.Validate(t, []apptest.ValidateCase[Options]{
		{Name: "defaults", Opts: DefaultOptions()},
		{Name: "no periodic recalculation", Opts: with(func(o *Options) { o.SyncPeriod = 0 })},
		{Name: "no workers", Opts: with(func(o *Options) { o.ConcurrentSyncs = 0 }), WantFlag: FlagConcurrentSyncs},
		{Name: "negative sync period", Opts: with(func(o *Options) { o.SyncPeriod = -time.Second }), WantFlag: FlagSyncPeriod},
		{Name: "zero discovery period", Opts: with(func(o *Options) { o.DiscoveryPeriod = 0 }), WantFlag: FlagDiscoveryPeriod},
		{Name: "zero informer sync timeout", Opts: with(func(o *Options) { o.InformerSyncTimeout = 0 }), WantFlag: FlagInformerSyncTimeout},
	})
}

// Bad values, from flags or the environment, exit with the usage code before anything
// connects anywhere.
func TestBadFlagsExitWithUsageCode(t *testing.T) {
	apptest.BadFlags(t, Spec, []apptest.BadFlag{
		{Name: "zero workers", Args: []string{"--" + FlagConcurrentSyncs + "=0"}, WantFlag: FlagConcurrentSyncs},
		{Name: "negative sync period", Args: []string{"--" + FlagSyncPeriod + "=-1s"}, WantFlag: FlagSyncPeriod},
		{Name: "sub-second discovery period", Args: []string{"--" + FlagDiscoveryPeriod + "=500ms"}, WantFlag: FlagDiscoveryPeriod},
		{Name: "from the environment", Env: map[string]string{app.EnvVar(FlagInformerSyncTimeout): "0s"}, WantFlag: FlagInformerSyncTimeout},
	})
}

func TestSpec(t *testing.T) { apptest.CheckSpec(t, Spec, ControllerID, DefaultPort) }
