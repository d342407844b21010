package features

import (
	"strings"
	"testing"

	"k8s.io/component-base/featuregate"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		values  []string
		wantErr []string // substrings of the error; none means no error
		want    map[featuregate.Feature]bool
	}{
		{name: "none: upstream's defaults", want: map[featuregate.Feature]bool{
			PodLevelResources: true, SeparateTaintEvictionController: true, OrderedNamespaceDeletion: true,
			VolumeAttributesClass: true, InPlacePodVerticalScaling: true,
		}},
		{name: "a beta gate off", values: []string{"PodLevelResources=false"}, want: map[featuregate.Feature]bool{PodLevelResources: false}},
		{name: "later values win", values: []string{"PodLevelResources=false", "PodLevelResources=true"}, want: map[featuregate.Feature]bool{PodLevelResources: true}},
		{name: "a gate of another controller is accepted", values: []string{"DRAAdminAccess=true,PodLevelResources=false"}, want: map[featuregate.Feature]bool{PodLevelResources: false}},
		{name: "a locked gate at its lock", values: []string{"SeparateTaintEvictionController=true"}, want: map[featuregate.Feature]bool{SeparateTaintEvictionController: true}},
		{name: "a locked gate against its lock", values: []string{"SeparateTaintEvictionController=false"}, wantErr: []string{"SeparateTaintEvictionController", "locked"}},
		{name: "unknown gates, each named", values: []string{"NoSuchGate=true,PodLevelResources=false,AlsoMissing=false"}, wantErr: []string{"NoSuchGate", "AlsoMissing"}},
		{name: "not a boolean", values: []string{"PodLevelResources=maybe"}, wantErr: []string{"PodLevelResources"}},
		{name: "no value", values: []string{"PodLevelResources"}, wantErr: []string{"PodLevelResources"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fg, err := Parse(tc.values)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Parse(%q) accepted, want an error naming %v", tc.values, tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.values, err)
			}
			for g, want := range tc.want {
				if got := fg.Enabled(g); got != want {
					t.Errorf("%s = %t, want %t", g, got, want)
				}
			}
		})
	}
}

// The generated table is kube-controller-manager's: the gates kcm-split acts on are in it, as
// are gates of controllers kcm-split does not replace, and the two meta gates come from the
// parser itself.
func TestKnown(t *testing.T) {
	for _, g := range []featuregate.Feature{PodLevelResources, InPlacePodVerticalScaling, SeparateTaintEvictionController,
		OrderedNamespaceDeletion, VolumeAttributesClass, "DRAAdminAccess", "ContextualLogging"} {
		if !Known(g) {
			t.Errorf("%s unknown", g)
		}
	}
	if Known("NoSuchGate") {
		t.Error("NoSuchGate known")
	}
	if _, err := Parse([]string{"AllBeta=false"}); err != nil {
		t.Errorf("AllBeta refused: %v", err)
	}
}

func TestNamed(t *testing.T) {
	got := strings.Join(Named([]string{"B=true, A=false", "B=false", ""}), " ")
	if got != "A B" {
		t.Errorf("Named = %q, want %q", got, "A B")
	}
}
