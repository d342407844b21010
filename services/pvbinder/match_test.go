package pvbinder

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Over 80 lines: one table of cases, each a few lines; splitting it would scatter the cases.
func TestFindBestMatch(t *testing.T) {
	rwo, rox, rwx := v1.ReadWriteOnce, v1.ReadOnlyMany, v1.ReadWriteMany
	tests := []struct {
		name  string
		claim *v1.PersistentVolumeClaim
		pvs   []*v1.PersistentVolume
		delay bool
		skip  string
		want  string // "" = none
	}{
		{"smallest that fits", makeClaim("c", "5Gi"),
			[]*v1.PersistentVolume{makePV("a", "10Gi"), makePV("b", "5Gi"), makePV("c", "4Gi"), makePV("d", "6Gi")}, false, "", "b"},
		{"equal sizes: lowest name", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("z", "1Gi"), makePV("m", "1Gi")}, false, "", "m"},
		{"too small everywhere", makeClaim("c", "5Gi"),
			[]*v1.PersistentVolume{makePV("a", "4Gi")}, false, "", ""},
		{"only Available PVs", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi", pvPhase(v1.VolumePending)), makePV("b", "1Gi", pvPhase(v1.VolumeReleased)), makePV("c", "2Gi")}, false, "", "c"},
		{"claimed PVs skipped", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi", pvRef("other", "")), makePV("b", "2Gi")}, false, "", "b"},
		{"deleting PVs skipped", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi", pvDeleting()), makePV("b", "2Gi")}, false, "", "b"},
		{"class must be equal", makeClaim("c", "1Gi", claimClassOpt("fast")),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "2Gi", pvClass("fast")), makePV("c", "1Gi", pvClass("slow"))}, false, "", "b"},
		{"no class matches no class only", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi", pvClass("fast")), makePV("b", "2Gi")}, false, "", "b"},
		{"beta class annotation wins over the field", makeClaim("c", "1Gi", claimAnn(v1.BetaStorageClassAnnotation, "gold")),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "1Gi", pvClass("gold"))}, false, "", "b"},
		{"volume mode must be equal", makeClaim("c", "1Gi", claimBlock()),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "2Gi", pvBlock())}, false, "", "b"},
		{"access modes a superset", makeClaim("c", "1Gi", claimModes(rwx)),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "2Gi", pvModes(rwo, rwx))}, false, "", "b"},
		{"fewest access modes first, even if larger", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi", pvModes(rwo, rox)), makePV("b", "5Gi")}, false, "", "b"},
		{"wider group when the narrow one has no fit", makeClaim("c", "3Gi"),
			[]*v1.PersistentVolume{makePV("a", "3Gi", pvModes(rwo, rox)), makePV("b", "2Gi")}, false, "", "a"},
		{"selector matches labels", makeClaim("c", "1Gi", claimSelector(map[string]string{"tier": "db"})),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "5Gi", pvLabels(map[string]string{"tier": "db"}))}, false, "", "b"},
		{"selector matching nothing", makeClaim("c", "1Gi", claimSelector(map[string]string{"tier": "db"})),
			[]*v1.PersistentVolume{makePV("a", "1Gi", pvLabels(map[string]string{"tier": "web"}))}, false, "", ""},
		{"pre-bound PV wins over a smaller one", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "9Gi", pvRef("c", ""), pvPhase(v1.VolumePending))}, false, "", "b"},
		{"pre-bound by UID wins", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "9Gi", pvRef("c", claimUID("c")), pvModes(rwo, rox))}, false, "", "b"},
		{"pre-bound to another UID of the same name is not ours", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("b", "1Gi", pvRef("c", "old-uid"))}, false, "", ""},
		{"pre-bound but too small", makeClaim("c", "5Gi"),
			[]*v1.PersistentVolume{makePV("b", "1Gi", pvRef("c", "")), makePV("a", "5Gi")}, false, "", "a"},
		{"pre-bound ignores class and selector", makeClaim("c", "1Gi", claimClassOpt("x"), claimSelector(map[string]string{"k": "v"})),
			[]*v1.PersistentVolume{makePV("b", "1Gi", pvRef("c", ""))}, false, "", "b"},
		{"delay binding: unbound PVs not taken", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi")}, true, "", ""},
		{"delay binding: pre-bound PV taken", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "1Gi", pvRef("c", ""))}, true, "", "b"},
		{"reserved PV skipped", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "2Gi")}, false, "a", "b"},
		{"no request fits anything", makeClaim("c", "0"),
			[]*v1.PersistentVolume{makePV("a", "1Gi")}, false, "", "a"},
		{"attributes class must be equal", makeClaim("c", "1Gi", claimVAC("gold")),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "2Gi", pvVAC("gold")), makePV("c", "1Gi", pvVAC("silver"))}, false, "", "b"},
		{"no attributes class matches none only", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi", pvVAC("gold")), makePV("b", "2Gi")}, false, "", "b"},
		{"pre-bound PV with another attributes class not taken", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("b", "1Gi", pvRef("c", ""), pvVAC("gold")), makePV("a", "2Gi")}, false, "", "a"},
		{"pre-bound PV with another access-mode set not taken", makeClaim("c", "1Gi", claimModes(rwx)),
			[]*v1.PersistentVolume{makePV("b", "1Gi", pvRef("c", "")), makePV("a", "2Gi", pvModes(rwx))}, false, "", "a"},
		{"a reservation does not hide a PV pre-bound to the claim", makeClaim("c", "1Gi"),
			[]*v1.PersistentVolume{makePV("a", "1Gi"), makePV("b", "2Gi", pvRef("c", ""))}, false, "b", "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skip := func(pv *v1.PersistentVolume) bool { return pv.Name == tt.skip }
			got, err := findBestMatch(tt.claim, tt.pvs, tt.delay, skip)
			if err != nil {
				t.Fatal(err)
			}
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tt.want {
				t.Errorf("got %q, want %q", name, tt.want)
			}
		})
	}
}

func claimVAC(name string) claimOpt {
	return func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeAttributesClassName = &name }
}

func pvVAC(name string) pvOpt {
	return func(pv *v1.PersistentVolume) { pv.Spec.VolumeAttributesClassName = &name }
}

func TestFindBestMatchBadSelector(t *testing.T) {
	c := makeClaim("c", "1Gi")
	c.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}}
	if _, err := findBestMatch(c, []*v1.PersistentVolume{makePV("a", "1Gi")}, false, nil); err == nil {
		t.Fatal("want an error for an invalid selector")
	}
}

func TestCheckSatisfies(t *testing.T) {
	tests := []struct {
		name  string
		pv    *v1.PersistentVolume
		claim *v1.PersistentVolumeClaim
		want  string
	}{
		{"fits", makePV("a", "1Gi"), makeClaim("c", "1Gi"), ""},
		{"deleting", makePV("a", "1Gi", pvDeleting()), makeClaim("c", "1Gi"), `the volume is marked for deletion "a"`},
		{"small", makePV("a", "1Gi"), makeClaim("c", "2Gi"), "requested PV is too small"},
		{"class", makePV("a", "1Gi", pvClass("x")), makeClaim("c", "1Gi"), "storageClassName does not match"},
		{"mode", makePV("a", "1Gi", pvBlock()), makeClaim("c", "1Gi"), "incompatible volumeMode"},
		{"access", makePV("a", "1Gi"), makeClaim("c", "1Gi", claimModes(v1.ReadWriteMany)), "incompatible accessMode"},
		{"attributes class", makePV("a", "1Gi", pvVAC("gold")), makeClaim("c", "1Gi"), "volumeAttributesClassName does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := checkSatisfies(tt.pv, tt.claim); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDefaultClass(t *testing.T) {
	old := makeClass("old", "p", storagev1.VolumeBindingImmediate, true)
	old.CreationTimestamp = metav1.Unix(100, 0)
	newer := makeClass("newer", "p", storagev1.VolumeBindingImmediate, true)
	newer.CreationTimestamp = metav1.Unix(200, 0)
	beta := makeClass("beta", "p", storagev1.VolumeBindingImmediate, false)
	beta.Annotations = map[string]string{AnnBetaDefaultClass: "true"}
	beta.CreationTimestamp = metav1.Unix(50, 0)
	plain := makeClass("plain", "p", storagev1.VolumeBindingImmediate, false)
	plain.CreationTimestamp = metav1.Unix(300, 0)
	twin := makeClass("a-twin", "p", storagev1.VolumeBindingImmediate, true)
	twin.CreationTimestamp = metav1.Unix(200, 0)

	for _, tt := range []struct {
		name    string
		classes []*storagev1.StorageClass
		want    string
	}{
		{"none", []*storagev1.StorageClass{plain}, ""},
		{"newest default", []*storagev1.StorageClass{old, newer, plain}, "newer"},
		{"beta annotation counts", []*storagev1.StorageClass{beta, plain}, "beta"},
		{"tie broken by name", []*storagev1.StorageClass{newer, twin}, "a-twin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if c := defaultClass(tt.classes); c != nil {
				got = c.Name
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
