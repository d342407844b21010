package tainteviction

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Every metric this controller exports has its upstream name, passes promlint and is
// registered once even when two controllers share a registry.
func TestMetricsNamesAndLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	newMetrics(reg) // a second registration reuses the collectors
	m.podDeletions.Add(0)
	m.podDeletionDur.Observe(1)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	want := "taint_eviction_controller_pod_deletion_duration_seconds taint_eviction_controller_pod_deletions_total"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("metrics:\n got %s\nwant %s", got, want)
	}
}
