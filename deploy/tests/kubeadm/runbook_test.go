package kubeadm

import (
	"fmt"
	"os"
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
	for _, fn := range []string{"kcm_split_states", "kcm_split_wait", "kcm_lease_moved", "kcm_lease_new", "kcm_flags"} {
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

// fakeKubectl is a kubectl for the helpers: the release's Deployments (by component), each one's
// Pods ("name phase port ready" lines) and each running Pod's take-over state (a Pod without a
// state cannot be read); KCM's Lease (holder, acquire time) and KCM's Pods ("name start" lines).
const fakeKubectl = `#!/bin/bash
a="$*"
case "$a" in
*"get deployments"*) printf '%s\n' $DEPLOYMENTS ;;
*"get lease kube-controller-manager"*"holderIdentity"*) echo "$KCM_HOLDER since $KCM_ACQUIRED" ;;
*"get lease kube-controller-manager"*) printf '%s' "$KCM_ACQUIRED" ;;
*"get pods -l component=kube-controller-manager"*) printf '%s' "$KCM_STARTED" | tr ';' '\n' ;;
*"get pods"*)
  c=${a##*app.kubernetes.io/component=}; c=${c%% *}
  v=PODS_${c//-/_}; printf '%s' "${!v}" | tr ';' '\n' ;;
*"get --raw"*)
  p=${a#*https:}; p=${p%%:*}
  v=STATE_${p//-/_}; [ -n "${!v:-}" ] || exit 1
  printf '[+]ping ok\n[+]%s ok\nreadyz check passed\n' "${!v}" ;;
*) exit 2 ;;
esac
`

// runbookWithFakeKubectl reads the chart's runbook and returns it with the PATH entry of an
// environment whose kubectl is fakeKubectl.
func runbookWithFakeKubectl(t *testing.T) (*Runbook, string) {
	t.Helper()
	rb, err := ReadRunbook(filepath.Join("..", "..", "..", "charts", "kcm-split", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(fakeKubectl), 0o755); err != nil {
		t.Fatal(err)
	}
	return rb, "PATH=" + bin + ":" + os.Getenv("PATH")
}

// The helpers count a binary by its Deployment: one whose Pod is Pending, not Ready or missing
// is neither active nor waiting, so kcm_split_wait cannot succeed while its controllers run
// nowhere; nor waiting while any Pod is active.
func TestHelpersNeedAReadyPodOfEveryDeployment(t *testing.T) {
	rb, path := runbookWithFakeKubectl(t)
	rb.Blocks["probe"] = "kcm_split_wait \"$WANT\" 0\n"
	const (
		active  = "kcmTakeOver-active"
		waiting = "kcmTakeOver-waiting"
	)
	for _, tc := range []struct {
		name, want string
		pods       map[string]string // component: its Pods
		states     map[string]string // Pod: state
		ok         bool
	}{
		{"every binary active", "active", map[string]string{"ep": "ep-1 Running 10257 True;ep-2 Running 10257 True", "ns": "ns-1 Running 10258 True"},
			map[string]string{"ep-1": active, "ep-2": waiting, "ns-1": active}, true},
		{"a binary's Pod Pending", "active", map[string]string{"ep": "ep-1 Running 10257 True", "ns": "ns-1 Pending 10258 False"},
			map[string]string{"ep-1": active}, false},
		{"a binary without a Pod", "active", map[string]string{"ep": "ep-1 Running 10257 True"},
			map[string]string{"ep-1": active}, false},
		{"active but not Ready", "active", map[string]string{"ep": "ep-1 Running 10257 True", "ns": "ns-1 Running 10258 False"},
			map[string]string{"ep-1": active, "ns-1": active}, false},
		{"every binary waiting", "waiting", map[string]string{"ep": "ep-1 Running 10257 True", "ns": "ns-1 Running 10258 True;ns-2 Pending 10258 False"},
			map[string]string{"ep-1": waiting, "ns-1": waiting}, true},
		{"waiting, a binary's Pod Pending", "waiting", map[string]string{"ep": "ep-1 Running 10257 True", "ns": "ns-1 Pending 10258 False"},
			map[string]string{"ep-1": waiting}, false},
		{"waiting, but a Pod active", "waiting", map[string]string{"ep": "ep-1 Running 10257 True;ep-2 Running 10257 False", "ns": "ns-1 Running 10258 True"},
			map[string]string{"ep-1": waiting, "ep-2": active, "ns-1": waiting}, false},
		{"a running Pod unreadable", "waiting", map[string]string{"ep": "ep-1 Running 10257 True;ep-2 Running 10257 True", "ns": "ns-1 Running 10258 True"},
			map[string]string{"ep-1": waiting, "ns-1": waiting}, false},
	} {
		env := []string{path, "NS=kube-system", "RELEASE=r", "WANT=" + tc.want, "DEPLOYMENTS=ep ns"}
		for c, pods := range tc.pods {
			env = append(env, fmt.Sprintf("PODS_%s=%s", c, pods))
		}
		for pod, state := range tc.states {
			env = append(env, fmt.Sprintf("STATE_%s=%s", strings.ReplaceAll(pod, "-", "_"), state))
		}
		out, err := rb.Run(t.Context(), t.TempDir(), env, "probe", "helpers")
		if (err == nil) != tc.ok {
			t.Errorf("%s: kcm_split_wait %s: %v, want ok=%t:\n%s", tc.name, tc.want, err, tc.ok, out)
		}
	}
}

// kcm_lease_new passes only once KCM's Lease was acquired after the start of the earliest KCM
// container running now: the old KCM's Lease, one not acquired, or a KCM Pod not running (no
// start yet) keep it waiting (step 3's check would otherwise pass in the moment between the
// old KCM's Lease expiring and the new KCM taking it).
func TestKCMLeaseNewWaitsForTheNewKCM(t *testing.T) {
	rb, path := runbookWithFakeKubectl(t)
	rb.Blocks["probe"] = "kcm_lease_new 0\n"
	for _, tc := range []struct {
		name, acquired, started string
		ok                      bool
	}{
		{"the new KCM holds it", "2026-11-28T14:25:12.519816Z", "kcm-a 2026-11-28T14:24:54Z", true},
		{"acquired within the second of the start", "2026-11-28T14:24:54.300000Z", "kcm-a 2026-11-28T14:24:54Z", true},
		{"after the earliest of two", "2026-11-28T14:25:12.519816Z", "kcm-a 2026-11-28T14:24:54Z;kcm-b 2026-11-28T14:26:00Z", true},
		{"the old KCM's Lease", "2026-11-28T14:20:01.000000Z", "kcm-a 2026-11-28T14:24:54Z", false},
		{"never acquired", "", "kcm-a 2026-11-28T14:24:54Z", false},
		{"a KCM Pod not running", "2026-11-28T14:25:12.519816Z", "kcm-a 2026-11-28T14:24:54Z;kcm-b", false},
		{"no KCM Pod", "2026-11-28T14:25:12.519816Z", "", false},
	} {
		env := []string{path, "KCM_HOLDER=vm_1", "KCM_ACQUIRED=" + tc.acquired, "KCM_STARTED=" + tc.started}
		out, err := rb.Run(t.Context(), t.TempDir(), env, "probe", "helpers")
		if (err == nil) != tc.ok {
			t.Errorf("%s: kcm_lease_new: %v, want ok=%t:\n%s", tc.name, err, tc.ok, out)
		}
	}
}
