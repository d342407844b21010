package namespace

import (
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/app/apptest"
)

func TestOptionsValidate(t *testing.T) {
	apptest.Validate(t, []apptest.ValidateCase[Options]{
		{Name: "defaults", Opts: DefaultOptions()},
		{Name: "no workers", Opts: Options{ConcurrentSyncs: 0, SyncPeriod: time.Minute}, WantFlag: FlagConcurrentSyncs},
		{Name: "zero sync period", Opts: Options{ConcurrentSyncs: 1}, WantFlag: FlagSyncPeriod},
	})
}

func TestDefaultsAreUpstreams(t *testing.T) {
	d := DefaultOptions()
	if d.ConcurrentSyncs != 10 || d.SyncPeriod != 5*time.Minute || d.GracePeriod != 5*time.Second {
		t.Errorf("defaults = %+v, want 10 workers, 5m sync period, 5s grace", d)
	}
}

// Bad values, from flags or the environment, exit with the usage code before anything
// connects anywhere.
func TestBadFlagsExitWithUsageCode(t *testing.T) {
	apptest.BadFlags(t, Spec, []apptest.BadFlag{
		{Name: "zero workers", Args: []string{"--" + FlagConcurrentSyncs + "=0"}, WantFlag: FlagConcurrentSyncs},
		{Name: "negative sync period", Args: []string{"--" + FlagSyncPeriod + "=-1s"}, WantFlag: FlagSyncPeriod},
		{Name: "from the environment", Env: map[string]string{app.EnvVar(FlagSyncPeriod): "0s"}, WantFlag: FlagSyncPeriod},
	})
}

func TestSpec(t *testing.T) { apptest.CheckSpec(t, Spec, ControllerID, DefaultPort) }
