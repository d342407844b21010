package chart

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"sigs.k8s.io/yaml"
)

// Artifact Hub's annotations stay true: one image per controller at the chart's appVersion
// (the tag the chart installs by default), the CRD the chart renders, valid YAML in each.
func TestArtifactHubAnnotations(t *testing.T) {
	c, v := chart(t)
	b, err := os.ReadFile(filepath.Join(c.Dir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		AppVersion  string            `json:"appVersion"`
		KubeVersion string            `json:"kubeVersion"`
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	var images []struct {
		Name, Image string
	}
	if err := yaml.Unmarshal([]byte(meta.Annotations["artifacthub.io/images"]), &images); err != nil {
		t.Fatalf("artifacthub.io/images: %v", err)
	}
	var got, want []string
	for _, im := range images {
		got = append(got, im.Image)
	}
	for _, a := range v.Aliases() {
		want = append(want, "ghcr.io/kcm-split/"+v.Controllers[a].Binary+":"+meta.AppVersion)
	}
	sort.Strings(got)
	sort.Strings(want)
	if len(got) != len(want) {
		t.Fatalf("artifacthub.io/images %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("artifacthub.io/images %v, want %v", got, want)
			break
		}
	}
	var crds []struct{ Kind, Version, Name string }
	if err := yaml.Unmarshal([]byte(meta.Annotations["artifacthub.io/crds"]), &crds); err != nil {
		t.Fatalf("artifacthub.io/crds: %v", err)
	}
	rendered := byKind(render(t, c, "r", ns, v.Only("servicelb")...), "CustomResourceDefinition")
	if len(crds) != len(rendered) || len(crds) != 1 || crds[0].Name != rendered[0].Name {
		t.Errorf("artifacthub.io/crds %+v, but the chart renders %d CRDs", crds, len(rendered))
	}
	var examples []map[string]any
	if err := yaml.Unmarshal([]byte(meta.Annotations["artifacthub.io/crdsExamples"]), &examples); err != nil || len(examples) != 1 || examples[0]["kind"] != crds[0].Kind {
		t.Errorf("artifacthub.io/crdsExamples: %v %v", err, examples)
	}
	for _, k := range []string{"artifacthub.io/license", "artifacthub.io/links", "artifacthub.io/category"} {
		if meta.Annotations[k] == "" {
			t.Errorf("Chart.yaml lacks %s", k)
		}
	}
}
