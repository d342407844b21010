package nodelifecycle

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestZoneKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{name: "no labels", want: ""},
		{name: "GA labels", labels: map[string]string{v1.LabelTopologyRegion: "eu", v1.LabelTopologyZone: "eu-1a"}, want: "eu:\x00:eu-1a"},
		{name: "zone only", labels: map[string]string{v1.LabelTopologyZone: "z"}, want: ":\x00:z"},
		{name: "beta labels win, as upstream", labels: map[string]string{
			v1.LabelTopologyRegion: "ga", v1.LabelTopologyZone: "ga-z",
			v1.LabelFailureDomainBetaRegion: "beta", v1.LabelFailureDomainBetaZone: "beta-z",
		}, want: "beta:\x00:beta-z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels}}
			if got := zoneKey(n); got != tc.want {
				t.Errorf("zoneKey = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestZoneName(t *testing.T) {
	for key, want := range map[string]string{"": "(no zone labels)", "eu:\x00:eu-1a": "eu:eu-1a", ":\x00:z": ":z"} {
		if got := zoneName(key); got != want {
			t.Errorf("zoneName(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestZoneState(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ready, notReady int
		want            ZoneState
	}{
		{name: "all ready", ready: 10, want: StateNormal},
		{name: "empty", want: StateNormal},
		{name: "none ready", notReady: 1, want: StateFullDisruption},
		{name: "none ready, many", notReady: 50, want: StateFullDisruption},
		{name: "2 of 3 down: not more than 2", ready: 1, notReady: 2, want: StateNormal},
		{name: "3 of 5 down: 60%", ready: 2, notReady: 3, want: StatePartialDisruption},
		{name: "6 of 10 down", ready: 4, notReady: 6, want: StatePartialDisruption},
		{name: "5 of 10 down: below 55%", ready: 5, notReady: 5, want: StateNormal},
		{name: "11 of 20 down: exactly 55%", ready: 9, notReady: 11, want: StatePartialDisruption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := zoneState(tc.ready, tc.notReady, 0.55); got != tc.want {
				t.Errorf("zoneState(%d, %d) = %s, want %s", tc.ready, tc.notReady, got, tc.want)
			}
		})
	}
}

func TestZoneRate(t *testing.T) {
	o := DefaultOptions()
	for _, tc := range []struct {
		state ZoneState
		size  int
		want  float64
	}{
		{StateInitial, 3, 0.1},
		{StateNormal, 3, 0.1},
		{StateNormal, 500, 0.1},
		{StateFullDisruption, 3, 0.1},
		{StatePartialDisruption, 50, 0},    // not larger than the threshold: stop
		{StatePartialDisruption, 51, 0.01}, // large: secondary rate
	} {
		if got := o.zoneRate(tc.state, tc.size); got != tc.want {
			t.Errorf("zoneRate(%s, %d) = %g, want %g", tc.state, tc.size, got, tc.want)
		}
	}
}

// --zone-full-disruption-eviction-rate sets the rate of a fully disrupted zone only; unset
// (the default) it is the healthy rate, as upstream; 0 stops tainting such zones.
func TestZoneFullDisruptionRate(t *testing.T) {
	o := DefaultOptions()
	if o.ZoneFullDisruptionEvictionRate != RateUnset {
		t.Fatalf("default = %g, want unset (%d)", o.ZoneFullDisruptionEvictionRate, RateUnset)
	}
	for _, r := range []float64{0, 0.02} {
		o.ZoneFullDisruptionEvictionRate = r
		if got := o.zoneRate(StateFullDisruption, 3); got != r {
			t.Errorf("rate %g: full disruption = %g", r, got)
		}
		if got := o.zoneRate(StateNormal, 3); got != 0.1 {
			t.Errorf("rate %g: normal = %g, want 0.1", r, got)
		}
		if got := o.zoneRate(StatePartialDisruption, 51); got != 0.01 {
			t.Errorf("rate %g: partial = %g, want 0.01", r, got)
		}
	}
}
