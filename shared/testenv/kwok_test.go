package testenv

import (
	"path/filepath"
	"strings"
	"testing"
)

// Every stage by default, the named ones otherwise; a stage that is not there is `make
// tools`'s to build, not a kwok started without it.
func TestKwokPaths(t *testing.T) {
	if err := KwokBuilt(); err != nil {
		t.Skip(err)
	}
	_, all, err := Kwok{}.paths()
	if err != nil || len(all) < 2 {
		t.Fatalf("all stages: %v, %v", all, err)
	}
	bin, two, err := Kwok{Stages: []string{"node-initialize.yaml", "node-heartbeat-with-lease.yaml"}}.paths()
	if err != nil || len(two) != 2 || filepath.Base(two[1]) != "node-heartbeat-with-lease.yaml" || filepath.Base(bin) != "kwok" {
		t.Fatalf("named stages: %s %v, %v", bin, two, err)
	}
	if _, _, err := (Kwok{Stages: []string{"no-such-stage.yaml"}}).paths(); err == nil || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("a missing stage: %v, want an error naming make tools", err)
	}
}
