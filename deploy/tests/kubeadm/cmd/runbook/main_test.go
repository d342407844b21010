package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var readme = filepath.Join("..", "..", "..", "..", "..", "charts", "kcm-split", "README.md")

func TestRenderGivesTheBlocksAfterTheHelpersInOrder(t *testing.T) {
	script, err := render(readme, []string{"step-2", "step-0"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(script, "set -euo pipefail\n") {
		t.Errorf("the script does not stop at the first failure:\n%s", script)
	}
	helpers := strings.Index(script, "kcm_split_states() {")
	step2 := strings.Index(script, "kubectl replace -f -")
	step0 := strings.Index(script, "kcm-split-plan --kubeconfig")
	if helpers < 0 || step2 < 0 || step0 < 0 || helpers >= step2 || step2 >= step0 {
		t.Errorf("want the helpers, step-2, step-0 in that order; at %d, %d, %d:\n%s", helpers, step2, step0, script)
	}
	if out, err := exec.Command("bash", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v: %s", err, out)
	}
}

func TestRenderRefusesAnUnknownBlockOrNone(t *testing.T) {
	if _, err := render(readme, []string{"step-0", "step-99"}); err == nil || !strings.Contains(err.Error(), "step-99") {
		t.Errorf("an unknown block: got %v, want an error naming it", err)
	}
	if _, err := render(readme, nil); err == nil {
		t.Error("no block: want an error")
	}
}
