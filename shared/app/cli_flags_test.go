package app

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/logging"
)

// Upstream's logging flags reach the logger; kcm-split's older names stay as aliases that
// the upstream flag overrides, wherever each was given.
func TestLoggingFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    logging.Options
		ignored [][2]string
		// enabled and disabled verbosities at a call site in this file
		enabled, disabled int
	}{
		{name: "defaults", want: logging.Options{Level: "info", Format: "json"}, enabled: 0, disabled: 1},
		{name: "--v", args: []string{"--v=4"}, want: logging.Options{Level: "4", Format: "json"}, enabled: 4, disabled: 5},
		{name: "-v", args: []string{"-v=4"}, want: logging.Options{Level: "4", Format: "json"}, enabled: 4, disabled: 5},
		{name: "-v value", args: []string{"-v", "2"}, want: logging.Options{Level: "2", Format: "json"}, enabled: 2, disabled: 3},
		{name: "--v=0", args: []string{"--v=0"}, want: logging.Options{Level: "0", Format: "json"}, enabled: 0, disabled: 1},
		{name: "--log-level alias", args: []string{"--log-level=2"}, want: logging.Options{Level: "2", Format: "json"}, enabled: 2, disabled: 3},
		{name: "--log-level debug", args: []string{"--log-level=debug"}, want: logging.Options{Level: "debug", Format: "json"}, enabled: 1, disabled: 2},
		{name: "--v wins over --log-level", args: []string{"--log-level=2", "--v=4"}, want: logging.Options{Level: "4", Format: "json"}, ignored: [][2]string{{"log-level", "v"}}, enabled: 4, disabled: 5},
		{name: "--v wins whatever the order", args: []string{"--v=1", "--log-level=6"}, want: logging.Options{Level: "1", Format: "json"}, ignored: [][2]string{{"log-level", "v"}}, enabled: 1, disabled: 2},
		{name: "env KCM_SPLIT_V", env: map[string]string{"KCM_SPLIT_V": "3"}, want: logging.Options{Level: "3", Format: "json"}, enabled: 3, disabled: 4},
		{name: "env KCM_SPLIT_V wins over --log-level", args: []string{"--log-level=2"}, env: map[string]string{"KCM_SPLIT_V": "5"}, want: logging.Options{Level: "5", Format: "json"}, ignored: [][2]string{{"log-level", "v"}}, enabled: 5, disabled: 6},
		{name: "--vmodule", args: []string{"--vmodule=foo=3"}, want: logging.Options{Level: "info", VModule: "foo=3", Format: "json"}, enabled: 0, disabled: 1},
		{name: "--vmodule naming this file", args: []string{"--v=1", "--vmodule=cli_flags_test=3,other=5"}, want: logging.Options{Level: "1", VModule: "cli_flags_test=3,other=5", Format: "json"}, enabled: 3, disabled: 4},
		{name: "env KCM_SPLIT_VMODULE", env: map[string]string{"KCM_SPLIT_VMODULE": "foo=2"}, want: logging.Options{Level: "info", VModule: "foo=2", Format: "json"}, enabled: 0, disabled: 1},
		{name: "--logging-format=json", args: []string{"--logging-format=json"}, want: logging.Options{Level: "info", Format: "json"}, enabled: 0, disabled: 1},
		{name: "--logging-format=text", args: []string{"--logging-format=text"}, want: logging.Options{Level: "info", Format: "text"}, enabled: 0, disabled: 1},
		{name: "--log-format alias", args: []string{"--log-format=console"}, want: logging.Options{Level: "info", Format: "console"}, enabled: 0, disabled: 1},
		{name: "--logging-format wins over --log-format", args: []string{"--log-format=console", "--logging-format=json"}, want: logging.Options{Level: "info", Format: "json"}, ignored: [][2]string{{"log-format", "logging-format"}}, enabled: 0, disabled: 1},
		{name: "env KCM_SPLIT_LOGGING_FORMAT", env: map[string]string{"KCM_SPLIT_LOGGING_FORMAT": "text"}, want: logging.Options{Level: "info", Format: "text"}, enabled: 0, disabled: 1},
		{name: "env KCM_SPLIT_LOG_FORMAT", env: map[string]string{"KCM_SPLIT_LOG_FORMAT": "console"}, want: logging.Options{Level: "info", Format: "console"}, enabled: 0, disabled: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			spec := testSpec(nil)
			o, _, err := parse(spec, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if o.logging.log != tc.want {
				t.Errorf("log options = %+v, want %+v", o.logging.log, tc.want)
			}
			if !reflect.DeepEqual(o.logging.ignored, tc.ignored) {
				t.Errorf("ignored = %v, want %v", o.logging.ignored, tc.ignored)
			}
			_, logger, err := logging.New(o.logging.log)
			if err != nil {
				t.Fatal(err)
			}
			if err := logging.RouteKlog(logger, o.logging.log); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = logging.RouteKlog(logger, logging.Options{Level: "info"}) })
			if !logger.V(tc.enabled).Enabled() || logger.V(tc.disabled).Enabled() {
				t.Errorf("logger V(%d) enabled = %v, V(%d) = %v; want true, false", tc.enabled, logger.V(tc.enabled).Enabled(), tc.disabled, logger.V(tc.disabled).Enabled())
			}
			if tc.enabled > 0 && (!klog.V(klog.Level(tc.enabled)).Enabled() || klog.V(klog.Level(tc.disabled)).Enabled()) {
				t.Errorf("klog V(%d) enabled = %v, V(%d) = %v; want true, false", tc.enabled, klog.V(klog.Level(tc.enabled)).Enabled(), tc.disabled, klog.V(klog.Level(tc.disabled)).Enabled())
			}
		})
	}
}

// --feature-gates reaches the gates the controller reads, from the command line (repeated
// flags add up) or the environment, with kube-controller-manager's defaults for the rest.
func TestFeatureGates(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want map[featuregate.Feature]bool
	}{
		{name: "defaults", want: map[featuregate.Feature]bool{features.PodLevelResources: true, features.OrderedNamespaceDeletion: true}},
		{name: "flag", args: []string{"--feature-gates=PodLevelResources=false"}, want: map[featuregate.Feature]bool{features.PodLevelResources: false}},
		{name: "repeated", args: []string{"--feature-gates=PodLevelResources=false", "--feature-gates=DRAAdminAccess=true"},
			want: map[featuregate.Feature]bool{features.PodLevelResources: false, "DRAAdminAccess": true}},
		{name: "environment", env: map[string]string{"KCM_SPLIT_FEATURE_GATES": "PodLevelResources=false,DRAAdminAccess=true"},
			want: map[featuregate.Feature]bool{features.PodLevelResources: false, "DRAAdminAccess": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			o, _, err := parse(testSpec(nil), tc.args)
			if err != nil {
				t.Fatal(err)
			}
			for g, want := range tc.want {
				if got := o.features.gates.Enabled(g); got != want {
					t.Errorf("%s = %t, want %t", g, got, want)
				}
			}
		})
	}
}

// --help says which gates act on the binary, with their defaults.
func TestFeatureGatesHelp(t *testing.T) {
	spec := testSpec(nil)
	spec.FeatureGates = []featuregate.Feature{features.PodLevelResources}
	var out bytes.Buffer
	if code := Run(context.Background(), spec, []string{"test-controller", "--help"}, &out); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), "--feature-gates") || !strings.Contains(out.String(), "PodLevelResources=true") {
		t.Errorf("--help does not show --feature-gates with PodLevelResources=true:\n%s", out.String())
	}
}

// noEnvFlag is a cli.Flag with no EnvVars field.
type noEnvFlag struct{}

func (*noEnvFlag) String() string            { return "--odd" }
func (*noEnvFlag) Apply(*flag.FlagSet) error { return nil }
func (*noEnvFlag) Names() []string           { return []string{"odd"} }
func (*noEnvFlag) IsSet() bool               { return false }

// Every flag type gets its KCM_SPLIT_ variable; a type without an EnvVars field is a
// programming error, said at once.
func TestWithEnv(t *testing.T) {
	flags := withEnv([]cli.Flag{&cli.StringFlag{Name: "kube-api-content-type"}, &cli.BoolFlag{Name: "leader-elect"},
		&cli.IntFlag{Name: "concurrent-syncs"}, &cli.Int64Flag{Name: "i64"}, &cli.UintFlag{Name: "u"},
		&cli.Float64Flag{Name: "kube-api-qps"}, &cli.DurationFlag{Name: "min-resync-period"}, &cli.StringSliceFlag{Name: "controllers"}})
	for _, f := range flags {
		got := f.(cli.DocGenerationFlag).GetEnvVars()
		if want := EnvVar(f.Names()[0]); len(got) != 1 || got[0] != want {
			t.Errorf("--%s (%T): EnvVars %v, want [%s]", f.Names()[0], f, got, want)
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "--odd") {
			t.Fatalf("withEnv of a flag without EnvVars: panic %v, want one naming --odd", r)
		}
	}()
	withEnv([]cli.Flag{&noEnvFlag{}})
}
