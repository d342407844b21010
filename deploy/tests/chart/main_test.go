package chart

import (
	"os"
	"path/filepath"
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

// TestMain starts the control plane with the audit policy above.
func TestMain(m *testing.M) {
	testenv.MainWithOptions(m, &env, testenv.Options{AuditPolicy: auditPolicy})
}

// buildBinary builds services/<alias>/cmd/<binary> from inside its own module (so it works
// with or without go.work) once per test binary, and returns its path.
func buildBinary(t testing.TB, alias, binary string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Binary{ID: binary, Dir: filepath.Join(root, "services", alias)}.Path(t)
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
	// What an install creates: without the helm test hooks (templates/tests), which only
	// `helm test` creates; helmtest_test.go renders those.
	return templateObjects(t, c, release, ns, append([]string{"--skip-tests"}, args...)...)
}

// templateObjects is `helm template` with args, decoded; any error fails the test.
func templateObjects(t testing.TB, c *Chart, release, ns string, args ...string) []Object {
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
