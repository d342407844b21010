package metrics

import (
	"context"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
)

// TestUpstreamNamesAndLint checks that a registry built here exposes the workqueue and REST
// client metrics under component-base's names, so upstream dashboards work, and that
// everything passes promlint.
func TestUpstreamNamesAndLint(t *testing.T) {
	reg := NewRegistry()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpoint", MetricsProvider: WorkqueueProvider(reg)})
	defer q.ShutDown()
	q.Add("a")
	k, _ := q.Get()
	q.Done(k)
	q.AddRateLimited("b")

	// Drive client-go's process-wide hooks, which NewRegistry wired to our collectors.
	clientmetrics.RequestLatency.Observe(context.Background(), "GET", url.URL{Host: "127.0.0.1:6443"}, 10*time.Millisecond)
	clientmetrics.RequestResult.Increment(context.Background(), "200", "GET", "127.0.0.1:6443")

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = true
	}
	want := []string{
		"workqueue_depth", "workqueue_adds_total", "workqueue_queue_duration_seconds",
		"workqueue_work_duration_seconds", "workqueue_unfinished_work_seconds",
		"workqueue_longest_running_processor_seconds", "workqueue_retries_total",
		"rest_client_requests_total", "rest_client_request_duration_seconds",
		"go_goroutines", "process_resident_memory_bytes",
	}
	var missing []string
	for _, n := range want {
		if !got[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("missing metric families: %s", strings.Join(missing, ", "))
	}
	// component-base's own names: kept for dashboard compatibility.
	metricstest.Lint(t, reg, "workqueue_")
}

func TestRegisterReturnsTheExistingCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"l"}))
	b := Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"l"}))
	a.WithLabelValues("v").Inc()
	if testutil.ToFloat64(b.WithLabelValues("v")) != 1 {
		t.Fatal("second Register did not return the registered collector")
	}
	// Two registries (two controllers in one test binary) both get the REST metrics.
	NewRegistry()
	NewRegistry()
}

func TestTermRegistry(t *testing.T) {
	var term TermRegistry
	if got, err := term.Gather(); err != nil || len(got) != 0 {
		t.Fatalf("before a term: %v, %v", got, err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "term_counter", Help: "h"})
	Register(term.Begin(), c).Add(2)
	got, err := term.Gather()
	if err != nil || len(got) != 1 || got[0].GetName() != "term_counter" || got[0].Metric[0].Counter.GetValue() != 2 {
		t.Fatalf("during the term: %v, %v", got, err)
	}
	term.End()
	if got, _ := term.Gather(); len(got) != 0 {
		t.Fatalf("after the term: %v", got)
	}
	// A second term registers the same metric afresh: no AlreadyRegistered, a new series.
	c2 := Register(term.Begin(), prometheus.NewCounter(prometheus.CounterOpts{Name: "term_counter", Help: "h"}))
	if c2 == c {
		t.Fatal("the second term got the first term's collector")
	}
	got, _ = term.Gather()
	if v := got[0].Metric[0].Counter.GetValue(); v != 0 {
		t.Fatalf("second term starts at %v, want 0", v)
	}
}

// A Factory registers what it makes; asked twice for one metric it returns the first; without
// a registry it only makes.
func TestFactory(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "test_factory_total", Help: "h"}
	a := With(reg).NewCounterVec(opts, []string{"k"})
	b := With(reg).NewCounterVec(opts, []string{"k"})
	if a != b {
		t.Error("the second NewCounterVec made a new collector")
	}
	b.WithLabelValues("x").Inc()
	if n := testutil.CollectAndCount(reg, "test_factory_total"); n != 1 {
		t.Errorf("registry has %d series of test_factory_total, want 1", n)
	}
	With(nil).NewGauge(prometheus.GaugeOpts{Name: "test_unregistered", Help: "h"}).Set(1)
}
