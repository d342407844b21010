package nodelifecycle

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
)

// Every metric this controller exports, under its upstream name where one exists, passes
// promlint and is registered once even when two controllers share a registry.
func TestMetricsNamesAndLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	newMetrics(reg) // a second registration reuses the collectors
	m.zoneHealth.WithLabelValues("r:z").Set(100)
	m.zoneSize.WithLabelValues("r:z").Set(3)
	m.unhealthy.WithLabelValues("r:z").Set(0)
	m.evictions.WithLabelValues("r:z").Add(0)
	m.nodeHealthDur.Observe(0.01)
	m.allHealthDur.Observe(0.1)
	m.zoneRate.WithLabelValues("r:z").Set(0.1)
	m.paused.WithLabelValues("r:z", PauseAllZonesDown).Set(1)
	metricstest.Lint(t, reg)
	want := "kcm_split_nodelifecycle_evictions_paused kcm_split_nodelifecycle_partition_suspected kcm_split_nodelifecycle_zone_eviction_rate " +
		"node_collector_evictions_total node_collector_unhealthy_nodes_in_zone " +
		"node_collector_update_all_nodes_health_duration_seconds node_collector_update_node_health_duration_seconds " +
		"node_collector_zone_health node_collector_zone_size"
	if got := metricstest.Names(t, reg); got != want {
		t.Errorf("metrics:\n got %s\nwant %s", got, want)
	}
}
