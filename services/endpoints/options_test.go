package endpoints

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
		{name: "one worker, some batching", opts: Options{ConcurrentSyncs: 1, BatchPeriod: time.Second}},
		{name: "no workers", opts: Options{ConcurrentSyncs: 0}, wantFlag: FlagConcurrentSyncs},
		{name: "negative batch period", opts: Options{ConcurrentSyncs: 5, BatchPeriod: -time.Second}, wantFlag: FlagBatchPeriod},
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
	if d := DefaultOptions(); d.ConcurrentSyncs != 5 || d.BatchPeriod != 0 {
		t.Errorf("defaults = %+v, want 5 workers and no batching", d)
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
		{name: "negative batch period", args: []string{"--" + FlagBatchPeriod + "=-1s"}, wantFlag: FlagBatchPeriod},
		{name: "from the environment", env: map[string]string{app.EnvVar(FlagBatchPeriod): "-5s"}, wantFlag: FlagBatchPeriod},
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
	// app.Main adds environment variables to the flags in place: two Specs must not share them.
	if Spec().Flags[0] == s.Flags[0] {
		t.Error("Specs share flag values")
	}
}
