package servicelb

import (
	"strings"
	"testing"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/app/apptest"
)

func TestOptionsValidate(t *testing.T) {
	if d := DefaultOptions(); d.ConcurrentSyncs != 1 || d.MinRetryDelay.Seconds() != 5 || d.MaxRetryDelay.Seconds() != 300 {
		t.Fatalf("defaults are not upstream's: %+v", d)
	}
	with := func(f func(*Options)) Options { return apptest.With(DefaultOptions(), f) }
	apptest.Validate(t, []apptest.ValidateCase[Options]{
		{Name: "defaults", Opts: DefaultOptions()},
		{Name: "a valid class", Opts: with(func(o *Options) { o.LoadBalancerClass = "lb.kcm-split.io/pools" })},
		{Name: "no workers", Opts: with(func(o *Options) { o.ConcurrentSyncs = 0 }), WantFlag: FlagConcurrentSyncs},
		{Name: "class not a qualified name", Opts: with(func(o *Options) { o.LoadBalancerClass = "not a class!" }), WantFlag: FlagLoadBalancerClass},
	})
	if !strings.Contains(FlagConcurrentSyncs, "service") {
		t.Fatal("flag name drifted from upstream")
	}
}

// Bad values, from flags or the environment, exit with the usage code before anything
// connects anywhere.
func TestBadFlagsExitWithUsageCode(t *testing.T) {
	apptest.BadFlags(t, Spec, []apptest.BadFlag{
		{Name: "zero workers", Args: []string{"--" + FlagConcurrentSyncs + "=0"}, WantFlag: FlagConcurrentSyncs},
		{Name: "class not a qualified name", Args: []string{"--" + FlagLoadBalancerClass + "=not a class!"}, WantFlag: FlagLoadBalancerClass},
		{Name: "from the environment", Env: map[string]string{app.EnvVar(FlagLoadBalancerClass): "-bad-"}, WantFlag: FlagLoadBalancerClass},
	})
}

func TestSpec(t *testing.T) { apptest.CheckSpec(t, Spec, ControllerID, DefaultPort) }
