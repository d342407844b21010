// Package benchkit is the plumbing every services/<alias>/bench package shares: building our
// binary as it ships, the upstream kube-controller-manager command line, running a controller
// process and reading its CPU and memory from /proc, the benchmark's own informers, counting
// writes in the audit log, and printing the comparison table.
//
// Each benchmark keeps its scenario (fixtures, what it waits for, which rows it prints); only
// the way those are measured and shown lives here, so every benchmark measures the same way.
// The benchmarks run each side on a fresh control plane from shared/testenv, so nothing here
// assumes a TestMain.
package benchkit

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Upstream is the name of upstream's column and the start of its user agent in the audit log:
// without --use-service-account-credentials every upstream controller uses the kubeconfig's
// identity, and client-go's default user agent starts with the binary's name.
const (
	Upstream          = "kube-controller-manager"
	UpstreamUserAgent = Upstream + "/"
)

// StopTimeout is how long a controller gets to exit after SIGTERM before the benchmark kills
// it and fails.
const StopTimeout = 30 * time.Second

// Build compiles the main package pkg (an import path) into dir as `make build` and the
// Dockerfile ship it: static (CGO_ENABLED=0), -trimpath, stripped (-s -w). Upstream's
// kube-controller-manager in bin/ is built the same way, so RSS compares like with like.
func Build(pkg, dir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", pkg, err)
	}
	return out, nil
}

// BuildShipped is Build into tb's temporary directory (removed when tb ends), failing tb on a
// build error: our side must build, unlike upstream's, which may be absent.
func BuildShipped(tb testing.TB, pkg string) string {
	tb.Helper()
	out, err := Build(pkg, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// UpstreamKCM returns bin/kube-controller-manager (or $KCM_SPLIT_BIN_DIR's), or an error that
// names `make tools` when it is missing: benchmarks then skip upstream's side.
func UpstreamKCM(testing.TB) (string, error) {
	dir, err := testenv.FindBinDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, Upstream)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s not found: run `make tools`", bin)
	}
	return bin, nil
}

// UpstreamArgs is the command line of kube-controller-manager running only controllers
// (upstream's names, comma separated) against kubeconfig: no leader election, the kubeconfig's
// identity for every controller (so its writes carry UpstreamUserAgent), no secure serving
// (nothing scrapes it, and it would want certificates), --v=1. extra comes after those, so it
// may override any of them (the last value of a flag wins).
func UpstreamArgs(kubeconfig, controllers string, extra ...string) []string {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + controllers,
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--secure-port=0",
	}
	args = append(args, extra...)
	return append(args, "--v=1")
}

// OursArgs is the command line of a kcm-split controller against kubeconfig: no leader
// election, plain HTTP metrics and health on a free loopback port (whose base URL it returns,
// e.g. http://127.0.0.1:34567), --log-level=info, then extra.
func OursArgs(kubeconfig string, extra ...string) (args []string, url string, err error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, "", err
	}
	args = []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
		"--log-level=info",
	}
	return append(args, extra...), fmt.Sprintf("http://127.0.0.1:%d", port), nil
}

// RunSides runs one sub-benchmark per side, named name(side). The scenario is minutes long and
// measures one process lifetime, so run is called once per side and benchmark invocation; a
// larger b.N (-benchtime Nx) reports the same result again. It returns the results in the
// order of sides, nil where a side was skipped or failed.
func RunSides[S, R any](b *testing.B, sides []S, name func(S) string, run func(*testing.B, S) *R, report func(*R, *testing.B)) []*R {
	results := make([]*R, len(sides))
	for i, s := range sides {
		b.Run(name(s), func(b *testing.B) {
			if results[i] == nil {
				results[i] = run(b, s)
			}
			report(results[i], b)
		})
	}
	return results
}

// Parallel runs fn for 0..n-1 on workers goroutines and returns the first error; after an
// error no new index starts.
func Parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// insecure accepts the self-signed certificate kube-controller-manager serves on loopback.
var insecure = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a loopback benchmark target only
}}

// Get fetches url (http, or https with any certificate); code 0 means it did not answer.
func Get(url string) (code int, body string) {
	resp, err := insecure.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// ControlPlane starts a fresh etcd + kube-apiserver (shared/testenv, audit log on) for one
// side of a comparison, stopped when tb ends: each side gets its own, so neither inherits the
// other's objects, watch caches or audit log.
func ControlPlane(tb testing.TB) *testenv.Env {
	tb.Helper()
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		tb.Fatalf("starting the control plane: %v", err)
	}
	tb.Cleanup(env.Stop)
	return env
}
