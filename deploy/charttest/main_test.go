package charttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// env is the real control plane; nil under -short.
var env *testenv.Env

// auditPolicy records every request a ServiceAccount makes (reads too) and every write, so
// the RBAC test can compare what a controller did with what its role grants.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// TestMain starts the control plane with the audit policy above. (testenv.Main takes no
// Options, so this does what it does with testenv.Start; binaries are built here too.)
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	defer func() {
		if buildDir != "" {
			_ = os.RemoveAll(buildDir)
		}
	}()
	if isShort() {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "kcm-split-charttest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The last --audit-policy-file wins over testenv's own.
	e, err := testenv.Start(testenv.Options{ExtraAPIServerArgs: []string{"--audit-policy-file=" + policy}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	defer e.Stop()
	env = e
	return m.Run()
}

func isShort() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" || a == "--test.short" {
			return true
		}
	}
	return false
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{}
)

// buildBinary builds services/<alias>/cmd/<binary> from inside its own module (so it works
// with or without go.work) once per test binary, and returns its path.
func buildBinary(t testing.TB, alias, binary string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[binary]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "kcm-split-charttest-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(buildDir, binary)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+binary)
	cmd.Dir = filepath.Join(root, "services", alias)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", binary, err, b)
	}
	built[binary] = out
	return out
}

// chart returns the chart and its values; it fails the test when helm is missing.
func chart(t testing.TB) (*Chart, *Values) {
	t.Helper()
	c, err := FindChart(os.Getenv(testenv.BinDirEnv))
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.LoadValues()
	if err != nil {
		t.Fatal(err)
	}
	return c, v
}

// render templates the chart and decodes it, failing the test on any error.
func render(t testing.TB, c *Chart, release, ns string, args ...string) []Object {
	t.Helper()
	out, err := c.Template(release, ns, args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
