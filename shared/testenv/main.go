package testenv

import (
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
)

// Main starts a control plane, runs the package's tests and stops it. Use from TestMain:
//
//	var env *testenv.Env
//	func TestMain(m *testing.M) { testenv.Main(m, &env) }
//
// With -short the control plane is not started and env stays nil: integration tests should
// call testenv.Require(t, env), which skips them.
func Main(m *testing.M, env **Env) {
	os.Exit(run(m, env))
}

func run(m *testing.M, env **Env) int {
	defer removeBuilds()
	if isShort() {
		return m.Run()
	}
	start := time.Now()
	e, err := Start(Options{})
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

// Client returns an admin clientset.
func (env *Env) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
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
// exactly as it ships. Binaries live until the test binary exits (Main removes them), so a
// package can build once and start the binary from many tests.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir == "" {
		d, err := os.MkdirTemp("", "kcm-split-build-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build %s: %v", pkg, err)
	}
	return out
}

var (
	buildMu  sync.Mutex
	buildDir string
)

func removeBuilds() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
		buildDir = ""
	}
}
