package dashboards

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var committed = filepath.Join("..", "..", "..", "..", "charts", "kcm-split", "dashboards")

// The JSON the chart ships is what this generator writes, file for file: a hand edit of the
// JSON, or a change here without `go run ./gen`, fails.
func TestCommittedDashboardsCurrent(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(committed, name))
		if err != nil {
			t.Errorf("%s: %v (run `go run ./gen` in deploy/tests/chart/dashboards)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the generator writes: run `go run ./gen` in deploy/tests/chart/dashboards and commit", name)
		}
	}
	onDisk, err := filepath.Glob(filepath.Join(committed, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range onDisk {
		if _, ok := files[filepath.Base(f)]; !ok {
			t.Errorf("%s is not written by the generator", f)
		}
	}
}

// Every dashboard carries the tag its links list, so the overview reaches each controller's
// dashboard and each of them the overview; every dashboard has the cluster, job and instance
// variables its queries use.
func TestLinksAndVariables(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files["overview.json"]; !ok || len(files) != len(binaries)+1 {
		t.Fatalf("got %d dashboards, want the overview and %d controllers", len(files), len(binaries))
	}
	for name, b := range files {
		var d struct {
			Tags  []string `json:"tags"`
			Links []struct {
				Type       string   `json:"type"`
				Tags       []string `json:"tags"`
				IncludeVar bool     `json:"includeVars"`
				KeepTime   bool     `json:"keepTime"`
			} `json:"links"`
			Templating struct {
				List []struct {
					Name string `json:"name"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Contains(d.Tags, Tag) {
			t.Errorf("%s lacks the tag %q the links list", name, Tag)
		}
		linked := false
		for _, l := range d.Links {
			linked = linked || (l.Type == "dashboards" && slices.Contains(l.Tags, Tag) && l.IncludeVar && l.KeepTime)
		}
		if !linked {
			t.Errorf("%s has no link to the dashboards tagged %q keeping time and variables", name, Tag)
		}
		var vars []string
		for _, v := range d.Templating.List {
			vars = append(vars, v.Name)
		}
		if !slices.Equal(vars, []string{"datasource", "cluster", "job", "instance"}) {
			t.Errorf("%s variables = %v", name, vars)
		}
	}
}
