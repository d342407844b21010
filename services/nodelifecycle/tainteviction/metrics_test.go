package tainteviction

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
)

// Every metric this controller exports has its upstream name, passes promlint and is
// registered once even when two controllers share a registry.
func TestMetricsNamesAndLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	newMetrics(reg) // a second registration reuses the collectors
	m.podDeletions.Add(0)
	m.podDeletionDur.Observe(1)
	metricstest.Lint(t, reg)
	want := "taint_eviction_controller_pod_deletion_duration_seconds taint_eviction_controller_pod_deletions_total"
	if got := metricstest.Names(t, reg); got != want {
		t.Errorf("metrics:\n got %s\nwant %s", got, want)
	}
}
