package metricstest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// recorder is a testing.TB that keeps what Lint reports instead of failing the test.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatal(args ...any) { r.errors = append(r.errors, fmt.Sprint(args...)) }

func registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		prometheus.NewCounter(prometheus.CounterOpts{Name: "upstream_adds", Help: "A counter without _total, as upstream names it."}),
		prometheus.NewCounter(prometheus.CounterOpts{Name: "ours_writes_total", Help: "A counter named by the rules."}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "ours_depth", Help: "A gauge."}),
	)
	return reg
}

func TestLintReportsAllButUpstreamNames(t *testing.T) {
	r := &recorder{TB: t}
	Lint(r, registry())
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "upstream_adds") || !strings.Contains(r.errors[0], "_total") {
		t.Fatalf("Lint with no exemption reported %q, want the counter without _total", r.errors)
	}
	r = &recorder{TB: t}
	Lint(r, registry(), "upstream_")
	if len(r.errors) != 0 {
		t.Fatalf("Lint exempting upstream_ reported %q", r.errors)
	}
}

func TestNamesSorted(t *testing.T) {
	if got, want := Names(t, registry()), "ours_depth ours_writes_total upstream_adds"; got != want {
		t.Fatalf("Names = %q, want %q", got, want)
	}
}

func TestLabelValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reconcile_total", Help: "Reconciles."}, []string{"controller", "result"})
	reg.MustRegister(c)
	c.WithLabelValues("b", "ok")
	c.WithLabelValues("a", "ok")
	c.WithLabelValues("a", "error")
	if got := LabelValues(t, reg, "reconcile_total", "controller"); got != "a b" {
		t.Fatalf("LabelValues = %q, want %q", got, "a b")
	}
	if got := LabelValues(t, reg, "other_total", "controller"); got != "" {
		t.Fatalf("LabelValues of a missing family = %q", got)
	}
}
