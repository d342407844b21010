package testenv

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcm-split/kcm-split/shared/sharding"
)

// Main starts a control plane, runs the package's tests and stops it. Use from TestMain:
//
//	var env *testenv.Env
//	func TestMain(m *testing.M) { testenv.Main(m, &env) }
//
// With -short the control plane is not started and env stays nil: integration tests should
// call testenv.Require(t, env), which skips them.
func Main(m *testing.M, env **Env) {
	MainWithOptions(m, env, Options{})
}

// MainWithOptions is Main with a control plane tuned by opts: apiserver flags, an audit
// policy of the package's own, a Setup step (CRDs to install) before the tests run.
func MainWithOptions(m *testing.M, env **Env, opts Options) {
	os.Exit(run(m, env, opts))
}

func run(m *testing.M, env **Env, opts Options) int {
	defer removeBuilds()
	if isShort() {
		return m.Run()
	}
	start := time.Now()
	e, err := Start(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	defer e.Stop()
	fmt.Fprintf(os.Stderr, "testenv: kube-apiserver ready at %s in %s\n", e.Host, time.Since(start).Round(time.Millisecond))
	*env = e
	return m.Run()
}

// isShort reads -short before testing.Init has parsed flags in TestMain.
func isShort() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" || a == "--test.short" {
			return true
		}
	}
	return false
}

// Require skips t when no control plane runs (go test -short).
func Require(t testing.TB, env *Env) {
	t.Helper()
	if env == nil {
		t.Skip("integration test: needs the real control plane (run without -short)")
	}
}

// MustEnv is the environment variable name, which the script running the test (setBy, as
// "make chart-e2e") sets: unset or empty, it fails t.
func MustEnv(t testing.TB, name, setBy string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set (%s sets it)", name, setBy)
	}
	return v
}

// Client returns an admin clientset.
func (env *Env) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	return env.ClientAs(t, "")
}

// ClientAs returns an admin clientset whose requests carry userAgent ("": client-go's), so
// that the audit log tells them apart and their writes' field manager is its first word (a
// "kube-controller-manager/..." client writes as kube-controller-manager does).
func (env *Env) ClientAs(t testing.TB, userAgent string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	if userAgent != "" {
		cfg.UserAgent = userAgent
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartShards starts count shards of b (named name-0, name-1, ...) with --shards=count, their
// --shard-index, --shard-hash=hash ("" is sharding.HashFNV, the zero Shard's) and Leases in
// leaseNamespace, plus args, and waits (up to LeadTimeout each) until every one holds its
// shard's Lease and its caches are synced.
func (env *Env) StartShards(t testing.TB, b Binary, count int, hash sharding.Hash, name, leaseNamespace string, args ...string) []*Controller {
	t.Helper()
	shards := make([]*Controller, count)
	for i := range shards {
		shards[i] = env.Start(t, b, fmt.Sprintf("%s-%d", name, i), append([]string{fmt.Sprintf("--shards=%d", count),
			fmt.Sprintf("--shard-index=%d", i), "--shard-hash=" + string(hash.Name()), "--leader-elect-resource-namespace=" + leaseNamespace}, args...)...)
	}
	for i, s := range shards {
		s.WaitLeadingAndSynced(sharding.Shard{Index: i, Count: count, Hash: hash}.LeaseName(b.Lease()), LeadTimeout)
	}
	return shards
}

// Namespace creates a namespace named after the test and deletes it when the test ends
// (no namespace controller runs here, so it only turns Terminating).
func (env *Env) Namespace(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(t.Name())
	name = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, name)
	if len(name) > 40 {
		name = name[:40]
	}
	suffix, _ := randomHex(3)
	name = strings.Trim(name, "-") + "-" + suffix
	ctx := context.Background()
	client := env.Client(t)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// Build compiles the main package at pkg (a path relative to the current package, or an
// import path) and returns the binary's path. Integration tests use it to run a controller
// exactly as it ships. Binaries live until the test binary exits (Main removes them). Build
// compiles again on every call; BuildOnce and Binary.Path do not.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	out, err := build("", pkg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// BuildOnce is Build memoized per package: the first call in a test binary compiles pkg, the
// others return the same path. A failed build fails every test that asks for the binary.
func BuildOnce(t testing.TB, pkg string) string {
	t.Helper()
	return buildOnce(t, "", pkg)
}

// Binary is a kcm-split controller under test. Its ID is, by the repository's convention, the
// name of its main package under cmd/, its default Lease name and the first word of the user
// agent of its requests:
//
//	var controller = testenv.Binary{ID: quota.ControllerID}
//	c := env.Start(t, controller, "ctrl")
//	c.WaitLeadingAndSynced(controller.Lease(), time.Minute)
type Binary struct {
	// ID is the controller ID (e.g. "endpoints-controller").
	ID string
	// Dir is the directory of the module holding cmd/<ID>; empty means the test's package
	// directory (the module root, for a service's top-level tests). A test outside the
	// module sets it so that the build uses that module's go.mod, with or without go.work.
	Dir string
}

// Path builds ./cmd/<ID> (in Dir) the first time a test asks, and returns the binary's path.
func (b Binary) Path(t testing.TB) string {
	t.Helper()
	return buildOnce(t, b.Dir, "./cmd/"+b.ID)
}

// Lease is the name of the Lease the controller holds by default.
func (b Binary) Lease() string { return b.ID }

// UserAgentPrefix starts the user agent of every request the controller makes, so that
// env.Writes(ByUserAgentPrefix(b.UserAgentPrefix())) counts its writes.
func (b Binary) UserAgentPrefix() string { return b.ID + "/" }

// Start builds b if needed and runs it as StartController does.
func (env *Env) Start(t testing.TB, b Binary, name string, args ...string) *Controller {
	t.Helper()
	return env.StartController(t, b.Path(t), name, args...)
}

// LeadTimeout bounds StartLeading's wait: leading and syncing take a second or two alone, far
// more on a machine busy with other test suites.
const LeadTimeout = time.Minute

// StartLeading is Start, then a wait (up to LeadTimeout) until the controller holds b's
// Lease and its caches are synced.
func (env *Env) StartLeading(t testing.TB, b Binary, name string, args ...string) *Controller {
	t.Helper()
	c := env.Start(t, b, name, args...)
	c.WaitLeadingAndSynced(b.Lease(), LeadTimeout)
	return c
}

type buildKey struct{ dir, pkg string }

type buildResult struct {
	path string
	err  error
}

var (
	buildMu  sync.Mutex
	buildDir string
	builds   = map[buildKey]buildResult{}
)

func buildOnce(t testing.TB, dir, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := buildKey{dir, pkg}
	r, done := builds[key]
	switch {
	case !done:
		r.path, r.err = build(dir, pkg)
		builds[key] = r
		if r.err != nil {
			t.Fatal(r.err)
		}
	case r.err != nil:
		t.Fatalf("%v(failed earlier in this test binary)", r.err)
	}
	return r.path
}

// build compiles pkg, running go build in dir ("" for the current directory), into a
// directory that lives until the test binary exits. The caller holds buildMu.
func build(dir, pkg string) (string, error) {
	if buildDir == "" {
		d, err := os.MkdirTemp("", "kcm-split-build-")
		if err != nil {
			return "", err
		}
		buildDir = d
	}
	// Two packages may share a base name (cmd/x in two modules): each build gets a directory
	// of its own, and the binary keeps its name.
	sub, err := os.MkdirTemp(buildDir, "")
	if err != nil {
		return "", err
	}
	out := filepath.Join(sub, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s (in %s): %v\n%s", pkg, cmp.Or(dir, "."), err, stderr.String())
	}
	return out, nil
}

func removeBuilds() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
		buildDir = ""
	}
	clear(builds)
}
