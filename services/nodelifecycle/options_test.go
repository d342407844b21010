package nodelifecycle

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/app"
)

func TestDefaultsAreUpstreams(t *testing.T) {
	d := DefaultOptions()
	want := Options{
		MonitorPeriod: 5 * time.Second, MonitorGracePeriod: 50 * time.Second, StartupGracePeriod: time.Minute,
		EvictionRate: 0.1, SecondaryEvictionRate: 0.01, LargeClusterThreshold: 50, UnhealthyZoneThreshold: 0.55,
		TaintEviction: true,
	}
	if d != want {
		t.Errorf("defaults = %+v, want %+v", d, want)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	with := func(f func(*Options)) Options {
		o := DefaultOptions()
		f(&o)
		return o
	}
	for _, tc := range []struct {
		name     string
		opts     Options
		wantFlag string
	}{
		{name: "short test timings", opts: with(func(o *Options) {
			o.MonitorPeriod, o.MonitorGracePeriod, o.StartupGracePeriod = time.Second, 4*time.Second, 6*time.Second
		})},
		{name: "grace equal to the period", opts: with(func(o *Options) { o.MonitorGracePeriod = o.MonitorPeriod })},
		{name: "rates 0 and thresholds at the bounds", opts: with(func(o *Options) {
			o.EvictionRate, o.SecondaryEvictionRate, o.UnhealthyZoneThreshold, o.LargeClusterThreshold = 0, 0, 1, 0
		})},
		{name: "zero period", opts: with(func(o *Options) { o.MonitorPeriod = 0 }), wantFlag: FlagMonitorPeriod},
		{name: "grace shorter than the period", opts: with(func(o *Options) { o.MonitorGracePeriod = 4 * time.Second }), wantFlag: FlagMonitorGracePeriod},
		{name: "startup grace shorter than the period", opts: with(func(o *Options) { o.StartupGracePeriod = time.Second }), wantFlag: FlagStartupGracePeriod},
		{name: "negative rate", opts: with(func(o *Options) { o.EvictionRate = -0.1 }), wantFlag: FlagEvictionRate},
		{name: "negative secondary rate", opts: with(func(o *Options) { o.SecondaryEvictionRate = -1 }), wantFlag: FlagSecondaryEvictionRate},
		{name: "negative large cluster threshold", opts: with(func(o *Options) { o.LargeClusterThreshold = -1 }), wantFlag: FlagLargeClusterThreshold},
		{name: "threshold above 1", opts: with(func(o *Options) { o.UnhealthyZoneThreshold = 1.5 }), wantFlag: FlagUnhealthyZoneThreshold},
		{name: "threshold below 0", opts: with(func(o *Options) { o.UnhealthyZoneThreshold = -0.1 }), wantFlag: FlagUnhealthyZoneThreshold},
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

// Bad values, from flags or the environment, exit with the usage code before anything
// connects anywhere, naming the flag.
func TestBadFlagsExitWithUsageCode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		wantFlag string
	}{
		{name: "negative rate", args: []string{"--node-eviction-rate=-1"}, wantFlag: FlagEvictionRate},
		{name: "NaN rate", args: []string{"--secondary-node-eviction-rate=NaN"}, wantFlag: FlagSecondaryEvictionRate},
		{name: "threshold outside 0..1", args: []string{"--unhealthy-zone-threshold=2"}, wantFlag: FlagUnhealthyZoneThreshold},
		{name: "grace below period", args: []string{"--node-monitor-period=10s", "--node-monitor-grace-period=5s"}, wantFlag: FlagMonitorGracePeriod},
		{name: "from the environment", env: map[string]string{app.EnvVar(FlagStartupGracePeriod): "1s"}, wantFlag: FlagStartupGracePeriod},
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
