package endpointscontroller

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/services/endpoints/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/mirroring"
	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/app/apptest"
)

func with(mutate func(*Options)) Options {
	o := DefaultOptions()
	mutate(&o)
	return o
}

func TestOptionsValidate(t *testing.T) {
	apptest.Validate(t, []apptest.ValidateCase[Options]{
		{Name: "defaults", Opts: DefaultOptions()},
		{Name: "one worker, some batching", Opts: with(func(o *Options) { o.Endpoints.ConcurrentSyncs, o.Endpoints.BatchPeriod = 1, time.Second })},
		{Name: "no workers", Opts: with(func(o *Options) { o.Endpoints.ConcurrentSyncs = 0 }), WantFlag: endpoints.FlagConcurrentSyncs},
		{Name: "negative batch period", Opts: with(func(o *Options) { o.Endpoints.BatchPeriod = -time.Second }), WantFlag: endpoints.FlagBatchPeriod},
		{Name: "no slice workers", Opts: with(func(o *Options) { o.EndpointSlice.ConcurrentSyncs = 0 }), WantFlag: endpointslice.FlagConcurrentSyncs},
		{Name: "slices of 1", Opts: with(func(o *Options) { o.EndpointSlice.MaxEndpointsPerSlice = 1 })},
		{Name: "slices of 1000", Opts: with(func(o *Options) { o.EndpointSlice.MaxEndpointsPerSlice = 1000 })},
		{Name: "empty slices", Opts: with(func(o *Options) { o.EndpointSlice.MaxEndpointsPerSlice = 0 }), WantFlag: endpointslice.FlagMaxEndpointsPerSlice},
		{Name: "slices of 1001", Opts: with(func(o *Options) { o.EndpointSlice.MaxEndpointsPerSlice = 1001 }), WantFlag: endpointslice.FlagMaxEndpointsPerSlice},
		{Name: "negative slice batch period", Opts: with(func(o *Options) { o.EndpointSlice.BatchPeriod = -time.Second }), WantFlag: endpointslice.FlagBatchPeriod},
		{Name: "no mirroring workers", Opts: with(func(o *Options) { o.Mirroring.ConcurrentSyncs = 0 }), WantFlag: mirroring.FlagConcurrentSyncs},
		{Name: "51 mirroring workers", Opts: with(func(o *Options) { o.Mirroring.ConcurrentSyncs = 51 }), WantFlag: mirroring.FlagConcurrentSyncs},
		{Name: "mirror 1 per subset", Opts: with(func(o *Options) { o.Mirroring.MaxEndpointsPerSubset = 1 })},
		{Name: "mirror none per subset", Opts: with(func(o *Options) { o.Mirroring.MaxEndpointsPerSubset = 0 }), WantFlag: mirroring.FlagMaxEndpointsPerSubset},
		{Name: "mirror 1001 per subset", Opts: with(func(o *Options) { o.Mirroring.MaxEndpointsPerSubset = 1001 }), WantFlag: mirroring.FlagMaxEndpointsPerSubset},
		{Name: "negative mirroring batch period", Opts: with(func(o *Options) { o.Mirroring.BatchPeriod = -time.Second }), WantFlag: mirroring.FlagBatchPeriod},
		{Name: "unknown controller", Opts: with(func(o *Options) { o.Controllers = "*,foo" }), WantFlag: FlagControllers},
	})
}

func TestDefaultsAreUpstreams(t *testing.T) {
	d := DefaultOptions()
	if d.Endpoints.ConcurrentSyncs != 5 || d.Endpoints.BatchPeriod != 0 || d.EndpointSlice.ConcurrentSyncs != 5 || d.EndpointSlice.MaxEndpointsPerSlice != 100 || d.EndpointSlice.BatchPeriod != 0 || d.Controllers != "*" ||
		d.Mirroring.ConcurrentSyncs != 5 || d.Mirroring.MaxEndpointsPerSubset != 1000 || d.Mirroring.BatchPeriod != 0 {
		t.Errorf("defaults = %+v, want 5 workers each, no batching, 100 endpoints per slice, 1000 mirrored per subset, every controller", d)
	}
}

func TestControllers(t *testing.T) {
	all := map[string]bool{endpoints.Name: true, endpointslice.Name: true, mirroring.Name: true}
	both := map[string]bool{endpoints.Name: true, endpointslice.Name: true, mirroring.Name: false}
	noSlices := map[string]bool{endpoints.Name: true, endpointslice.Name: false, mirroring.Name: true}
	onlyEndpoints := map[string]bool{endpoints.Name: true, endpointslice.Name: false, mirroring.Name: false}
	onlySlices := map[string]bool{endpoints.Name: false, endpointslice.Name: true, mirroring.Name: false}
	onlyMirroring := map[string]bool{endpoints.Name: false, endpointslice.Name: false, mirroring.Name: true}
	for _, tc := range []struct {
		flag    string
		want    map[string]bool
		wantErr string // in the error, besides the flag's name
	}{
		{flag: "*", want: all},
		{flag: "endpoints-controller,endpointslice-controller", want: both},
		{flag: "*,-endpointslice-controller", want: noSlices},
		{flag: "*,-endpointslice,-endpointslicemirroring", want: onlyEndpoints}, // upstream's aliases
		{flag: "*,-endpointslice-mirroring-controller", want: both},
		{flag: "endpointslice-mirroring-controller", want: onlyMirroring},
		{flag: "-endpoint,-endpointslice,*", want: onlyMirroring},
		{flag: "endpointslice-controller", want: onlySlices},
		{flag: " endpoint , endpointslice ", want: both},
		// The first entry naming a controller decides, as in kube-controller-manager.
		{flag: "endpoints-controller,-endpoints-controller,endpointslice", want: both},
		{flag: "-endpoints-controller,endpoints-controller,*", want: map[string]bool{endpointslice.Name: true, mirroring.Name: true, endpoints.Name: false}},
		// Disabling another controller of kube-controller-manager is not a choice here.
		{flag: "*,-garbage-collector-controller", wantErr: `unknown controllers "garbage-collector-controller"`},
		{flag: "*,foo,-bar", wantErr: `unknown controllers "foo", "bar"`},
		{flag: "-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller", wantErr: "enables none"},
		{flag: "", wantErr: "enables none"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			got, err := Options{Controllers: tc.flag}.Enabled()
			if tc.wantErr != "" {
				var fe *app.FlagError
				if !errors.As(err, &fe) || fe.Flag != FlagControllers || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Enabled() = %v, %v; want a FlagError for --%s with %q", got, err, FlagControllers, tc.wantErr)
				}
				return
			}
			want := maps.Clone(tc.want) // Enabled holds only the controllers turned on
			maps.DeleteFunc(want, func(_ string, on bool) bool { return !on })
			if err != nil || !maps.Equal(got, want) {
				t.Fatalf("Enabled() = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// Bad values, from flags or the environment, exit with the usage code before anything
// connects anywhere.
func TestBadFlagsExitWithUsageCode(t *testing.T) {
	apptest.BadFlags(t, Spec, []apptest.BadFlag{
		{Name: "zero workers", Args: []string{"--" + endpoints.FlagConcurrentSyncs + "=0"}, WantFlag: endpoints.FlagConcurrentSyncs},
		{Name: "negative batch period", Args: []string{"--" + endpoints.FlagBatchPeriod + "=-1s"}, WantFlag: endpoints.FlagBatchPeriod},
		{Name: "from the environment", Env: map[string]string{app.EnvVar(endpoints.FlagBatchPeriod): "-5s"}, WantFlag: endpoints.FlagBatchPeriod},
		{Name: "zero slice workers", Args: []string{"--" + endpointslice.FlagConcurrentSyncs + "=0"}, WantFlag: endpointslice.FlagConcurrentSyncs},
		{Name: "slices too large", Args: []string{"--" + endpointslice.FlagMaxEndpointsPerSlice + "=1001"}, WantFlag: endpointslice.FlagMaxEndpointsPerSlice},
		{Name: "negative slice batch period", Args: []string{"--" + endpointslice.FlagBatchPeriod + "=-1s"}, WantFlag: endpointslice.FlagBatchPeriod},
		{Name: "unknown controller", Args: []string{"--" + FlagControllers + "=*,nodelifecycle-controller"}, WantFlag: FlagControllers},
		{Name: "controllers from the environment", Env: map[string]string{app.EnvVar(FlagControllers): "-endpoint,-endpointslice,-endpointslicemirroring"}, WantFlag: FlagControllers},
		{Name: "mirroring subset too large", Args: []string{"--" + mirroring.FlagMaxEndpointsPerSubset + "=1001"}, WantFlag: mirroring.FlagMaxEndpointsPerSubset},
		{Name: "negative mirroring batch period", Args: []string{"--" + mirroring.FlagBatchPeriod + "=-1s"}, WantFlag: mirroring.FlagBatchPeriod},
	})
}

func TestSpec(t *testing.T) { apptest.CheckSpec(t, Spec, ControllerID, DefaultPort) }
