package endpoints

import (
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/app/apptest"
)

func TestOptionsValidate(t *testing.T) {
	apptest.Validate(t, []apptest.ValidateCase[Options]{
		{Name: "defaults", Opts: DefaultOptions()},
		{Name: "one worker, some batching", Opts: Options{ConcurrentSyncs: 1, BatchPeriod: time.Second}},
		{Name: "no workers", Opts: Options{ConcurrentSyncs: 0}, WantFlag: FlagConcurrentSyncs},
		{Name: "negative batch period", Opts: Options{ConcurrentSyncs: 5, BatchPeriod: -time.Second}, WantFlag: FlagBatchPeriod},
	})
}

func TestDefaultsAreUpstreams(t *testing.T) {
	if d := DefaultOptions(); d.ConcurrentSyncs != 5 || d.BatchPeriod != 0 {
		t.Errorf("defaults = %+v, want 5 workers and no batching", d)
	}
}

// Bad values, from flags or the environment, exit with the usage code before anything
// connects anywhere.
func TestBadFlagsExitWithUsageCode(t *testing.T) {
	apptest.BadFlags(t, Spec, []apptest.BadFlag{
		{Name: "zero workers", Args: []string{"--" + FlagConcurrentSyncs + "=0"}, WantFlag: FlagConcurrentSyncs},
		{Name: "negative batch period", Args: []string{"--" + FlagBatchPeriod + "=-1s"}, WantFlag: FlagBatchPeriod},
		{Name: "from the environment", Env: map[string]string{app.EnvVar(FlagBatchPeriod): "-5s"}, WantFlag: FlagBatchPeriod},
	})
}

func TestSpec(t *testing.T) { apptest.CheckSpec(t, Spec, ControllerID, DefaultPort) }
