package namespace

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/app"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     Options
		wantFlag string
	}{
		{name: "defaults", opts: DefaultOptions()},
		{name: "no workers", opts: Options{ConcurrentSyncs: 0, SyncPeriod: time.Minute}, wantFlag: FlagConcurrentSyncs},
		{name: "zero sync period", opts: Options{ConcurrentSyncs: 1}, wantFlag: FlagSyncPeriod},
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

func TestDefaultsAreUpstreams(t *testing.T) {
	d := DefaultOptions()
	if d.ConcurrentSyncs != 10 || d.SyncPeriod != 5*time.Minute || d.GracePeriod != 5*time.Second {
		t.Errorf("defaults = %+v, want 10 workers, 5m sync period, 5s grace", d)
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
		{name: "zero workers", args: []string{"--" + FlagConcurrentSyncs + "=0"}, wantFlag: FlagConcurrentSyncs},
		{name: "negative sync period", args: []string{"--" + FlagSyncPeriod + "=-1s"}, wantFlag: FlagSyncPeriod},
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
