package endpoints

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

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
		{Name: "one worker, some batching", Opts: with(func(o *Options) { o.ConcurrentSyncs, o.BatchPeriod = 1, time.Second })},
		{Name: "no workers", Opts: with(func(o *Options) { o.ConcurrentSyncs = 0 }), WantFlag: FlagConcurrentSyncs},
		{Name: "negative batch period", Opts: with(func(o *Options) { o.BatchPeriod = -time.Second }), WantFlag: FlagBatchPeriod},
		{Name: "no slice workers", Opts: with(func(o *Options) { o.ConcurrentSliceSyncs = 0 }), WantFlag: FlagConcurrentSliceSyncs},
		{Name: "slices of 1", Opts: with(func(o *Options) { o.MaxEndpointsPerSlice = 1 })},
		{Name: "slices of 1000", Opts: with(func(o *Options) { o.MaxEndpointsPerSlice = 1000 })},
		{Name: "empty slices", Opts: with(func(o *Options) { o.MaxEndpointsPerSlice = 0 }), WantFlag: FlagMaxEndpointsPerSlice},
		{Name: "slices of 1001", Opts: with(func(o *Options) { o.MaxEndpointsPerSlice = 1001 }), WantFlag: FlagMaxEndpointsPerSlice},
		{Name: "negative slice batch period", Opts: with(func(o *Options) { o.SliceBatchPeriod = -time.Second }), WantFlag: FlagSliceBatchPeriod},
		{Name: "no mirroring workers", Opts: with(func(o *Options) { o.MirroringConcurrentSyncs = 0 }), WantFlag: FlagMirroringConcurrentSyncs},
		{Name: "51 mirroring workers", Opts: with(func(o *Options) { o.MirroringConcurrentSyncs = 51 }), WantFlag: FlagMirroringConcurrentSyncs},
		{Name: "mirror 1 per subset", Opts: with(func(o *Options) { o.MirroringMaxEndpointsPerSubset = 1 })},
		{Name: "mirror none per subset", Opts: with(func(o *Options) { o.MirroringMaxEndpointsPerSubset = 0 }), WantFlag: FlagMirroringMaxEndpointsPerSubset},
		{Name: "mirror 1001 per subset", Opts: with(func(o *Options) { o.MirroringMaxEndpointsPerSubset = 1001 }), WantFlag: FlagMirroringMaxEndpointsPerSubset},
		{Name: "negative mirroring batch period", Opts: with(func(o *Options) { o.MirroringBatchPeriod = -time.Second }), WantFlag: FlagMirroringBatchPeriod},
		{Name: "unknown controller", Opts: with(func(o *Options) { o.Controllers = "*,foo" }), WantFlag: FlagControllers},
	})
}

func TestDefaultsAreUpstreams(t *testing.T) {
	d := DefaultOptions()
	if d.ConcurrentSyncs != 5 || d.BatchPeriod != 0 || d.ConcurrentSliceSyncs != 5 || d.MaxEndpointsPerSlice != 100 || d.SliceBatchPeriod != 0 || d.Controllers != "*" ||
		d.MirroringConcurrentSyncs != 5 || d.MirroringMaxEndpointsPerSubset != 1000 || d.MirroringBatchPeriod != 0 {
		t.Errorf("defaults = %+v, want 5 workers each, no batching, 100 endpoints per slice, 1000 mirrored per subset, every controller", d)
	}
}

func TestControllers(t *testing.T) {
	all := map[string]bool{EndpointsController: true, EndpointSliceController: true, EndpointSliceMirroringController: true}
	both := map[string]bool{EndpointsController: true, EndpointSliceController: true, EndpointSliceMirroringController: false}
	noSlices := map[string]bool{EndpointsController: true, EndpointSliceController: false, EndpointSliceMirroringController: true}
	onlyEndpoints := map[string]bool{EndpointsController: true, EndpointSliceController: false, EndpointSliceMirroringController: false}
	onlySlices := map[string]bool{EndpointsController: false, EndpointSliceController: true, EndpointSliceMirroringController: false}
	onlyMirroring := map[string]bool{EndpointsController: false, EndpointSliceController: false, EndpointSliceMirroringController: true}
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
		{flag: "-endpoints-controller,endpoints-controller,*", want: map[string]bool{EndpointSliceController: true, EndpointSliceMirroringController: true, EndpointsController: false}},
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
		{Name: "zero workers", Args: []string{"--" + FlagConcurrentSyncs + "=0"}, WantFlag: FlagConcurrentSyncs},
		{Name: "negative batch period", Args: []string{"--" + FlagBatchPeriod + "=-1s"}, WantFlag: FlagBatchPeriod},
		{Name: "from the environment", Env: map[string]string{app.EnvVar(FlagBatchPeriod): "-5s"}, WantFlag: FlagBatchPeriod},
		{Name: "zero slice workers", Args: []string{"--" + FlagConcurrentSliceSyncs + "=0"}, WantFlag: FlagConcurrentSliceSyncs},
		{Name: "slices too large", Args: []string{"--" + FlagMaxEndpointsPerSlice + "=1001"}, WantFlag: FlagMaxEndpointsPerSlice},
		{Name: "negative slice batch period", Args: []string{"--" + FlagSliceBatchPeriod + "=-1s"}, WantFlag: FlagSliceBatchPeriod},
		{Name: "unknown controller", Args: []string{"--" + FlagControllers + "=*,nodelifecycle-controller"}, WantFlag: FlagControllers},
		{Name: "controllers from the environment", Env: map[string]string{app.EnvVar(FlagControllers): "-endpoint,-endpointslice,-endpointslicemirroring"}, WantFlag: FlagControllers},
		{Name: "mirroring subset too large", Args: []string{"--" + FlagMirroringMaxEndpointsPerSubset + "=1001"}, WantFlag: FlagMirroringMaxEndpointsPerSubset},
		{Name: "negative mirroring batch period", Args: []string{"--" + FlagMirroringBatchPeriod + "=-1s"}, WantFlag: FlagMirroringBatchPeriod},
	})
}

func TestSpec(t *testing.T) { apptest.CheckSpec(t, Spec, ControllerID, DefaultPort) }
