package servicelb

import (
	"errors"
	"strings"
	"testing"

	"github.com/kcm-split/kcm-split/shared/app"
)

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if d := DefaultOptions(); d.ConcurrentSyncs != 1 || d.MinRetryDelay.Seconds() != 5 || d.MaxRetryDelay.Seconds() != 300 {
		t.Fatalf("defaults are not upstream's: %+v", d)
	}
	for _, tc := range []struct {
		mut  func(*Options)
		flag string
	}{
		{func(o *Options) { o.ConcurrentSyncs = 0 }, FlagConcurrentSyncs},
		{func(o *Options) { o.LoadBalancerClass = "not a class!" }, FlagLoadBalancerClass},
	} {
		o := DefaultOptions()
		tc.mut(&o)
		var fe *app.FlagError
		if err := o.Validate(); !errors.As(err, &fe) || fe.Flag != tc.flag {
			t.Errorf("Validate() = %v, want a FlagError for %s", err, tc.flag)
		}
	}
	o := DefaultOptions()
	o.LoadBalancerClass = "lb.kcm-split.io/pools"
	if err := o.Validate(); err != nil {
		t.Fatalf("a valid class: %v", err)
	}
	if !strings.Contains(FlagConcurrentSyncs, "service") {
		t.Fatal("flag name drifted from upstream")
	}
}
