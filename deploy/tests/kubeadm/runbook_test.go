package kubeadm

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The blocks the e2e runs, in the order the runbook gives them.
var wantBlocks = []string{"settings", "helpers", "step-0", "step-1", "step-2", "step-3-node", "step-3-check",
	"step-4", "step-5", "step-6", "step-6-check", "step-6-uninstall"}

func TestTheRunbookHasTheBlocksTheE2ERuns(t *testing.T) {
	rb, err := ReadRunbook(filepath.Join("..", "..", "..", "charts", "kcm-split", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rb.Order, wantBlocks) {
		t.Fatalf("runbook blocks %v, want %v", rb.Order, wantBlocks)
	}
	want := []string{"CHART", "CONTROLLERS", "KUBECONFIG", "NS", "RELEASE", "WORK"}
	if got := slices.Sorted(slices.Values(rb.Exported("settings"))); !slices.Equal(got, want) {
		t.Errorf("settings export %v, want %v (what the e2e sets)", got, want)
	}
	// Every block is valid bash, and the helpers define what the checks call.
	for _, id := range rb.Order {
		script, err := rb.Script(id, "helpers")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("bash", "-n", "-c", script).CombinedOutput(); err != nil {
			t.Errorf("block %s: bash -n: %v: %s", id, err, out)
		}
	}
	for _, fn := range []string{"kcm_split_states", "kcm_split_wait", "kcm_lease_moved", "kcm_flags"} {
		if !strings.Contains(rb.Blocks["helpers"], fn+"() {") {
			t.Errorf("helpers do not define %s", fn)
		}
	}
}

func TestParseRunbook(t *testing.T) {
	md := "text\n<!-- kubeadm-e2e: a -->\n```sh\necho a\necho b\n```\nmore\n  <!-- kubeadm-e2e: b-2 -->\n```sh\n```\n"
	rb, err := ParseRunbook([]byte(md))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rb.Order, []string{"a", "b-2"}) || rb.Blocks["a"] != "echo a\necho b\n" || rb.Blocks["b-2"] != "" {
		t.Errorf("parsed %v %q", rb.Order, rb.Blocks)
	}
	for name, bad := range map[string]string{
		"no fence":     "<!-- kubeadm-e2e: a -->\necho a\n",
		"other fence":  "<!-- kubeadm-e2e: a -->\n```yaml\nx: 1\n```\n",
		"unclosed":     "<!-- kubeadm-e2e: a -->\n```sh\necho a\n",
		"marked twice": "<!-- kubeadm-e2e: a -->\n```sh\n```\n<!-- kubeadm-e2e: a -->\n```sh\n```\n",
	} {
		if _, err := ParseRunbook([]byte(bad)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestExported(t *testing.T) {
	rb := &Runbook{Blocks: map[string]string{"s": "export A=1 B_2=x   # C=3 is a comment\nD=4\n  export E=\"$A\"\nmkdir -p \"$E\"\n"}}
	if got := rb.Exported("s"); !slices.Equal(got, []string{"A", "B_2", "E"}) {
		t.Errorf("Exported = %v", got)
	}
}

func TestScriptStopsAtTheFirstFailure(t *testing.T) {
	rb := &Runbook{Blocks: map[string]string{"h": "f() { echo from-f; }\n", "s": "f\nfalse\necho after\n"}}
	out, err := rb.Run(t.Context(), t.TempDir(), nil, "s", "h")
	if err == nil || !strings.Contains(out, "from-f") || strings.Contains(out, "after") {
		t.Errorf("Run = %q, %v: want the helper's output, then a failure before 'after'", out, err)
	}
	if _, err := rb.Script("missing"); err == nil {
		t.Error("Script of a missing block: no error")
	}
}
