package pvbinder

import (
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/app/apptest"
)

func TestOptionsValidate(t *testing.T) {
	apptest.Validate(t, []apptest.ValidateCase[Options]{
		{Name: "defaults", Opts: DefaultOptions()},
		{Name: "one worker, short period", Opts: Options{Workers: 1, SyncPeriod: time.Second}},
		{Name: "no workers", Opts: Options{Workers: 0, SyncPeriod: time.Second}, WantFlag: FlagWorkers},
		{Name: "zero period", Opts: Options{Workers: 1}, WantFlag: FlagSyncPeriod},
	})
}

func TestDefaultSyncPeriodIsUpstreams(t *testing.T) {
	if d := DefaultOptions(); d.SyncPeriod != 15*time.Second || d.Workers < 1 {
		t.Errorf("defaults = %+v, want upstream's 15s sync period", d)
	}
}

// Bad values, from flags or the environment, exit with the usage code before anything
// connects anywhere.
func TestBadFlagsExitWithUsageCode(t *testing.T) {
	apptest.BadFlags(t, Spec, []apptest.BadFlag{
		{Name: "zero workers", Args: []string{"--" + FlagWorkers + "=0"}, WantFlag: FlagWorkers},
		{Name: "negative period", Args: []string{"--" + FlagSyncPeriod + "=-1s"}, WantFlag: FlagSyncPeriod},
		{Name: "from the environment", Env: map[string]string{app.EnvVar(FlagSyncPeriod): "0s"}, WantFlag: FlagSyncPeriod},
	})
}

func TestSpec(t *testing.T) {
	s := Spec()
	if s.ID != ControllerID || s.DefaultPort != DefaultPort || s.Run == nil || s.Validate == nil {
		t.Errorf("Spec = %+v", s)
	}
	if Spec().Flags[0] == s.Flags[0] {
		t.Error("Specs share flag values")
	}
}

// The binder's own budget applies only while the user left both client flags alone.
func TestOwnBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{name: "nothing set", want: true},
		{name: "qps set", args: []string{"--" + app.FlagQPS + "=20"}},
		{name: "burst set", args: []string{"--" + app.FlagBurst + "=30"}},
		{name: "qps from the environment", env: map[string]string{app.EnvVar(app.FlagQPS): "20"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var got bool
			a := &cli.App{
				Flags: []cli.Flag{
					&cli.Float64Flag{Name: app.FlagQPS, Value: 20, EnvVars: []string{app.EnvVar(app.FlagQPS)}},
					&cli.IntFlag{Name: app.FlagBurst, Value: 30, EnvVars: []string{app.EnvVar(app.FlagBurst)}},
				},
				Action: func(c *cli.Context) error { got = ownBudget(c); return nil },
			}
			if err := a.Run(append([]string{"x"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("ownBudget = %v, want %v", got, tc.want)
			}
		})
	}
}
