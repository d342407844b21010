package nodelifecycle

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/services/nodelifecycle/ipam"
	"github.com/kcm-split/kcm-split/services/nodelifecycle/tainteviction"
	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/app/apptest"
)

func TestDefaultsAreUpstreams(t *testing.T) {
	d := DefaultOptions()
	want := Options{
		Controllers:   "*",
		MonitorPeriod: 5 * time.Second, MonitorGracePeriod: 50 * time.Second, StartupGracePeriod: time.Minute,
		EvictionRate: 0.1, SecondaryEvictionRate: 0.01, LargeClusterThreshold: 50, UnhealthyZoneThreshold: 0.55,
		TaintEviction: true, ZoneFullDisruptionEvictionRate: RateUnset,
		// Event-only (information), so on by default.
		IPAM: ipam.Options{FreeRangesWarning: ipam.DefaultFreeRangesWarning},
	}
	if d != want {
		t.Errorf("defaults = %+v, want %+v", d, want)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	with := func(f func(*Options)) Options { return apptest.With(DefaultOptions(), f) }
	apptest.Validate(t, []apptest.ValidateCase[Options]{
		{Name: "short test timings", Opts: with(func(o *Options) {
			o.MonitorPeriod, o.MonitorGracePeriod, o.StartupGracePeriod = time.Second, 4*time.Second, 6*time.Second
		})},
		{Name: "grace equal to the period", Opts: with(func(o *Options) { o.MonitorGracePeriod = o.MonitorPeriod })},
		{Name: "rates 0 and thresholds at the bounds", Opts: with(func(o *Options) {
			o.EvictionRate, o.SecondaryEvictionRate, o.UnhealthyZoneThreshold, o.LargeClusterThreshold = 0, 0, 1, 0
		})},
		{Name: "zero period", Opts: with(func(o *Options) { o.MonitorPeriod = 0 }), WantFlag: FlagMonitorPeriod},
		{Name: "grace shorter than the period", Opts: with(func(o *Options) { o.MonitorGracePeriod = 4 * time.Second }), WantFlag: FlagMonitorGracePeriod},
		{Name: "startup grace shorter than the period", Opts: with(func(o *Options) { o.StartupGracePeriod = time.Second }), WantFlag: FlagStartupGracePeriod},
		{Name: "negative rate", Opts: with(func(o *Options) { o.EvictionRate = -0.1 }), WantFlag: FlagEvictionRate},
		{Name: "negative secondary rate", Opts: with(func(o *Options) { o.SecondaryEvictionRate = -1 }), WantFlag: FlagSecondaryEvictionRate},
		{Name: "negative large cluster threshold", Opts: with(func(o *Options) { o.LargeClusterThreshold = -1 }), WantFlag: FlagLargeClusterThreshold},
		{Name: "threshold above 1", Opts: with(func(o *Options) { o.UnhealthyZoneThreshold = 1.5 }), WantFlag: FlagUnhealthyZoneThreshold},
		{Name: "threshold below 0", Opts: with(func(o *Options) { o.UnhealthyZoneThreshold = -0.1 }), WantFlag: FlagUnhealthyZoneThreshold},
		{Name: "full disruption rate 0", Opts: with(func(o *Options) { o.ZoneFullDisruptionEvictionRate = 0 })},
		{Name: "full disruption rate -0.5", Opts: with(func(o *Options) { o.ZoneFullDisruptionEvictionRate = -0.5 }), WantFlag: FlagZoneFullDisruptionEvictionRate},
		{Name: "partition fraction 0.5", Opts: with(func(o *Options) { o.PartitionUnknownFraction = 0.5 })},
		{Name: "partition fraction 1", Opts: with(func(o *Options) { o.PartitionUnknownFraction = 1 }), WantFlag: FlagPartitionUnknownFraction},
		{Name: "partition fraction negative", Opts: with(func(o *Options) { o.PartitionUnknownFraction = -0.1 }), WantFlag: FlagPartitionUnknownFraction},
		{Name: "negative free ranges warning", Opts: with(func(o *Options) { o.IPAM.FreeRangesWarning = -1 }), WantFlag: ipam.FlagCIDRFreeRangesWarning},
		{Name: "unknown controller", Opts: with(func(o *Options) { o.Controllers = "*,foo" }), WantFlag: FlagControllers},
		{Name: "only taint eviction, turned off", Opts: with(func(o *Options) { o.Controllers, o.TaintEviction = tainteviction.Name, false }), WantFlag: FlagControllers},
		// The IPAM flags are checked whichever controllers run, as before --controllers.
		{Name: "allocation without a cluster CIDR, IPAM not enabled", Opts: with(func(o *Options) { o.Controllers, o.IPAM.Allocate = "*,-node-ipam-controller", true }), WantFlag: ipam.FlagClusterCIDR},
	})
}

// Bad values, from flags or the environment, exit with the usage code before anything
// connects anywhere, naming the flag.
func TestBadFlagsExitWithUsageCode(t *testing.T) {
	apptest.BadFlags(t, Spec, []apptest.BadFlag{
		{Name: "negative rate", Args: []string{"--node-eviction-rate=-1"}, WantFlag: FlagEvictionRate},
		{Name: "NaN rate", Args: []string{"--secondary-node-eviction-rate=NaN"}, WantFlag: FlagSecondaryEvictionRate},
		{Name: "threshold outside 0..1", Args: []string{"--unhealthy-zone-threshold=2"}, WantFlag: FlagUnhealthyZoneThreshold},
		{Name: "grace below period", Args: []string{"--node-monitor-period=10s", "--node-monitor-grace-period=5s"}, WantFlag: FlagMonitorGracePeriod},
		{Name: "from the environment", Env: map[string]string{app.EnvVar(FlagStartupGracePeriod): "1s"}, WantFlag: FlagStartupGracePeriod},
		// Node IPAM: the combinations upstream refuses, and ours.
		{Name: "allocation without a cluster CIDR", Args: []string{"--allocate-node-cidrs"}, WantFlag: ipam.FlagClusterCIDR},
		{Name: "mask shorter than the cluster prefix", Args: []string{"--allocate-node-cidrs", "--cluster-cidr=10.0.0.0/16", "--node-cidr-mask-size=12"}, WantFlag: ipam.FlagNodeCIDRMaskSize},
		{Name: "IPv6 mask shorter than the cluster prefix", Args: []string{"--allocate-node-cidrs", "--cluster-cidr=10.0.0.0/16,fd00::/56", "--node-cidr-mask-size-ipv6=48"}, WantFlag: ipam.FlagNodeCIDRMaskSizeIPv6},
		{Name: "three cluster CIDRs", Args: []string{"--allocate-node-cidrs", "--cluster-cidr=10.0.0.0/16,fd00::/48,10.1.0.0/16"}, WantFlag: ipam.FlagClusterCIDR},
		{Name: "two IPv4 cluster CIDRs", Args: []string{"--allocate-node-cidrs", "--cluster-cidr=10.0.0.0/16,10.1.0.0/16"}, WantFlag: ipam.FlagClusterCIDR},
		{Name: "family-less mask on dual-stack", Args: []string{"--allocate-node-cidrs", "--cluster-cidr=10.0.0.0/16,fd00::/48", "--node-cidr-mask-size=24"}, WantFlag: ipam.FlagNodeCIDRMaskSize},
		{Name: "service range covering the cluster", Args: []string{"--allocate-node-cidrs", "--cluster-cidr=10.0.0.0/16", "--service-cluster-ip-range=10.0.0.0/8"}, WantFlag: ipam.FlagServiceClusterIPRange},
		{Name: "unknown controller", Args: []string{"--controllers=*,-garbage-collector-controller"}, WantFlag: FlagControllers},
		{Name: "IPAM alone without allocation", Args: []string{"--controllers=node-ipam-controller"}, WantFlag: FlagControllers},
		{Name: "cluster CIDR from the environment", Env: map[string]string{app.EnvVar(ipam.FlagAllocateNodeCIDRs): "true", app.EnvVar(ipam.FlagClusterCIDR): "10.0.0.0"}, WantFlag: ipam.FlagClusterCIDR},
	})
}

func TestIPAMFlagsReachTheOptions(t *testing.T) {
	// Parsed through the binary's own flag set (names, values and defaults) into its Options.
	spec := Spec()
	args := []string{"--allocate-node-cidrs", "--cluster-cidr=10.0.0.0/16,fd00::/48",
		"--node-cidr-mask-size-ipv4=26", "--node-cidr-mask-size-ipv6=60", "--service-cluster-ip-range=10.96.0.0/12"}
	if err := app.Parse(spec, args); err != nil {
		t.Fatalf("valid flags refused: %v", err)
	}
	got := spec.Options.(*Options).IPAM
	want := ipam.Options{Allocate: true, ClusterCIDR: "10.0.0.0/16,fd00::/48", MaskSizeIPv4: 26, MaskSizeIPv6: 60, ServiceCIDR: "10.96.0.0/12",
		FreeRangesWarning: ipam.DefaultFreeRangesWarning}
	if got != want {
		t.Errorf("IPAM options %+v, want %+v", got, want)
	}
	// The other settings keep their defaults.
	rest := *spec.Options.(*Options)
	rest.IPAM = DefaultOptions().IPAM
	if rest != DefaultOptions() {
		t.Errorf("other options %+v, want the defaults %+v", rest, DefaultOptions())
	}
}

// --controllers in upstream's syntax, and how the two boolean flags narrow it: each can only
// keep its controller off. The defaults run what the binary ran before --controllers.
func TestControllers(t *testing.T) {
	const (
		lifecycle = Name
		eviction  = tainteviction.Name
		nodeIPAM  = ipam.Name
	)
	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	for _, tc := range []struct {
		controllers string
		noEviction  bool // --enable-taint-eviction=false
		allocate    bool // --allocate-node-cidrs
		want        map[string]bool
		wantErr     string // in the error, besides the flag's name
	}{
		// Defaults: today's behaviour.
		{controllers: "*", want: set(lifecycle, eviction)},
		{controllers: "*", allocate: true, want: set(lifecycle, eviction, nodeIPAM)},
		{controllers: "*", noEviction: true, want: set(lifecycle)},
		{controllers: "*", noEviction: true, allocate: true, want: set(lifecycle, nodeIPAM)},
		// --controllers alone.
		{controllers: "*,-taint-eviction-controller", want: set(lifecycle)},
		{controllers: "*,-node-ipam-controller", allocate: true, want: set(lifecycle, eviction)},
		{controllers: "*,-node-lifecycle-controller", want: set(eviction)},
		{controllers: "node-lifecycle-controller", allocate: true, want: set(lifecycle)},
		{controllers: "taint-eviction-controller,node-ipam-controller", allocate: true, want: set(eviction, nodeIPAM)},
		{controllers: "nodelifecycle,nodeipam", allocate: true, want: set(lifecycle, nodeIPAM)}, // upstream's aliases
		{controllers: " -nodeipam , * ", allocate: true, want: set(lifecycle, eviction)},
		// The first entry naming a controller decides, as in kube-controller-manager.
		{controllers: "-taint-eviction-controller,taint-eviction-controller,*", want: set(lifecycle)},
		// A boolean keeps its controller off even when --controllers names it.
		{controllers: "*,taint-eviction-controller", noEviction: true, want: set(lifecycle)},
		{controllers: "node-lifecycle-controller,node-ipam-controller", want: set(lifecycle)},
		// Refused.
		{controllers: "node-ipam-controller", wantErr: "runs nothing"},
		{controllers: "taint-eviction-controller", noEviction: true, allocate: true, wantErr: "runs nothing"},
		{controllers: "-node-lifecycle-controller,-taint-eviction-controller,-node-ipam-controller", wantErr: "enables none"},
		{controllers: "*,-endpoints-controller,foo", wantErr: `unknown controllers "endpoints-controller", "foo"`},
	} {
		name := fmt.Sprintf("%s/eviction=%t/allocate=%t", tc.controllers, !tc.noEviction, tc.allocate)
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			o.Controllers, o.TaintEviction, o.IPAM.Allocate = tc.controllers, !tc.noEviction, tc.allocate
			got, err := o.Enabled()
			if tc.wantErr != "" {
				var fe *app.FlagError
				if !errors.As(err, &fe) || fe.Flag != FlagControllers || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Enabled() = %v, %v; want a FlagError for --%s with %q", got, err, FlagControllers, tc.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("Enabled() = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// The flags reach Options through the binary's own flag set, --controllers and both booleans.
func TestControllersFlagsReachTheOptions(t *testing.T) {
	spec := Spec()
	args := []string{"--controllers=*,-node-lifecycle-controller", "--enable-taint-eviction=false",
		"--allocate-node-cidrs", "--cluster-cidr=10.0.0.0/16"}
	if err := app.Parse(spec, args); err != nil {
		t.Fatalf("valid flags refused: %v", err)
	}
	got, err := spec.Options.(*Options).Enabled()
	if want := map[string]bool{ipam.Name: true}; err != nil || !maps.Equal(got, want) {
		t.Errorf("Enabled() = %v, %v; want %v", got, err, want)
	}
}
