package nodelifecycle

import (
	"maps"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestBetaLabelsToSet(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   map[string]string
	}{
		{name: "no stable labels: left alone", labels: map[string]string{"beta.kubernetes.io/os": "windows"}},
		{name: "missing beta labels added", labels: map[string]string{v1.LabelOSStable: "linux", v1.LabelArchStable: "arm64"},
			want: map[string]string{"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "arm64"}},
		{name: "a differing beta label follows the stable one", labels: map[string]string{v1.LabelOSStable: "linux", "beta.kubernetes.io/os": "windows",
			v1.LabelArchStable: "amd64", "beta.kubernetes.io/arch": "amd64"}, want: map[string]string{"beta.kubernetes.io/os": "linux"}},
		{name: "in line: nothing", labels: map[string]string{v1.LabelOSStable: "linux", "beta.kubernetes.io/os": "linux"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := readyNode("n", "z")
			n.Labels = tc.labels
			if got := betaLabelsToSet(n); !maps.Equal(got, tc.want) {
				t.Errorf("betaLabelsToSet = %v, want %v", got, tc.want)
			}
		})
	}
}
