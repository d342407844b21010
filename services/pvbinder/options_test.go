package pvbinder

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/app"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     Options
		wantFlag string
	}{
		{name: "defaults", opts: DefaultOptions()},
		{name: "one worker, short period", opts: Options{Workers: 1, SyncPeriod: time.Second}},
		{name: "no workers", opts: Options{Workers: 0, SyncPeriod: time.Second}, wantFlag: FlagWorkers},
		{name: "zero period", opts: Options{Workers: 1}, wantFlag: FlagSyncPeriod},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			var fe *app.FlagError
			switch {
			case tc.wantFlag == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.wantFlag != "" && (!errors.As(err, &fe) || fe.Flag != tc.wantFlag):
				t.Errorf("Validate = %v, want a FlagError for --%s", err, tc.wantFlag)
			}
		})
	}
}

func TestDefaultSyncPeriodIsUpstreams(t *testing.T) {
	if d := DefaultOptions(); d.SyncPeriod != 15*time.Second || d.Workers < 1 {
		t.Errorf("defaults = %+v, want upstream's 15s sync period", d)
	}
}

// Bad values, from flags or the environment, exit with the usage code before anything
// connects anywhere.
func TestBadFlagsExitWithUsageCode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		wantFlag string
	}{
		{name: "zero workers", args: []string{"--" + FlagWorkers + "=0"}, wantFlag: FlagWorkers},
		{name: "negative period", args: []string{"--" + FlagSyncPeriod + "=-1s"}, wantFlag: FlagSyncPeriod},
		{name: "from the environment", env: map[string]string{app.EnvVar(FlagSyncPeriod): "0s"}, wantFlag: FlagSyncPeriod},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			code := app.Run(context.Background(), Spec(), append([]string{ControllerID}, tc.args...), &stderr)
			if code != app.ExitUsage {
				t.Errorf("exit code %d, want %d; stderr: %s", code, app.ExitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), "--"+tc.wantFlag) {
				t.Errorf("stderr %q does not name --%s", stderr.String(), tc.wantFlag)
			}
		})
	}
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
