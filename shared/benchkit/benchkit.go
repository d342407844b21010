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
