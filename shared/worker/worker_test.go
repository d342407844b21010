package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/util/workqueue"
)

// instantLimiter retries at once so tests need no sleeps.
func instantLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[string](0, 0)
}

func newTestQueue(t *testing.T, maxRetries int) (*Queue[string], *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	q := New(Options[string]{Name: "test", Controller: "test-controller", MaxRetries: maxRetries, RateLimiter: instantLimiter(), Registerer: reg})
	t.Cleanup(q.ShutDown)
	return q, reg
}

func TestRetriesAreCappedAndDropCounted(t *testing.T) {
	q, _ := newTestQueue(t, 3)
	var calls int
	failing := func(context.Context, string) error { calls++; return errors.New("boom") }
	q.Add("ns/a")
	for i := 0; i < 10 && (q.Len() > 0 || i == 0); i++ {
		// AddRateLimited with zero delay lands in the queue on a timer; wait for it.
		deadline := time.Now().Add(2 * time.Second)
		for q.Len() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if q.Len() == 0 {
			break
		}
		q.ProcessNext(context.Background(), failing)
	}
	// The first try plus 3 retries, then dropped.
	if calls != 4 {
		t.Fatalf("sync called %d times, want 4 (1 try + 3 retries)", calls)
	}
	if got := testutil.ToFloat64(q.total.WithLabelValues("test-controller", ResultDropped)); got != 1 {
		t.Fatalf("dropped = %v, want 1", got)
	}
	if got := testutil.ToFloat64(q.total.WithLabelValues("test-controller", ResultError)); got != 3 {
		t.Fatalf("errors = %v, want 3", got)
	}
	if q.NumRequeues("ns/a") != 0 {
		t.Fatalf("dropped key still has %d requeues recorded", q.NumRequeues("ns/a"))
	}
}

func TestRequeueAfterIsNotAFailure(t *testing.T) {
	q, _ := newTestQueue(t, 1)
	q.Add("k")
	q.ProcessNext(context.Background(), func(context.Context, string) error { return RequeueAfter(10 * time.Millisecond) })
	if q.NumRequeues("k") != 0 {
		t.Fatalf("requeue counted as failure: NumRequeues = %d", q.NumRequeues("k"))
	}
	deadline := time.Now().Add(2 * time.Second)
	for q.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if q.Len() != 1 {
		t.Fatal("key did not come back after RequeueAfter")
	}
	if got := testutil.ToFloat64(q.total.WithLabelValues("test-controller", ResultRequeue)); got != 1 {
		t.Fatalf("requeue = %v, want 1", got)
	}
}

func TestPanicBecomesRetry(t *testing.T) {
	q, _ := newTestQueue(t, 5)
	q.Add("k")
	q.ProcessNext(context.Background(), func(context.Context, string) error { panic("nil map") })
	if q.NumRequeues("k") != 1 {
		t.Fatalf("panic not retried: NumRequeues = %d", q.NumRequeues("k"))
	}
}

func TestRunProcessesAndStops(t *testing.T) {
	q, reg := newTestQueue(t, 0)
	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx, 3, func(context.Context, string) error { n.Add(1); return nil }); close(done) }()
	for _, k := range []string{"a", "b", "c", "a"} {
		q.Add(k)
	}
	deadline := time.Now().Add(5 * time.Second)
	for n.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if !q.ShuttingDown() {
		t.Fatal("queue not shut down after Run returned")
	}
	if n.Load() < 3 {
		t.Fatalf("processed %d keys, want >= 3", n.Load())
	}
	// workqueue metrics carry upstream names and the queue name.
	if c, err := testutil.GatherAndCount(reg, "workqueue_adds_total"); err != nil || c != 1 {
		t.Fatalf("workqueue_adds_total series = %d, %v", c, err)
	}
}
