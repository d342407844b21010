package nodelifecycle

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// Pause reasons, the values of the reason label of kcm_split_nodelifecycle_evictions_paused.
const (
	PauseAllZonesDown      = "AllZonesDown"
	PausePartialDisruption = "PartialDisruption"
)

// controllerMetrics are upstream's node_collector_* metrics, plus kcm-split's view of why NoExecute tainting is paused. Zone labels are bounded by the
// number of failure domains; nothing is labelled per Node or Pod.
type controllerMetrics struct {
	zoneHealth    *prometheus.GaugeVec
	zoneSize      *prometheus.GaugeVec
	unhealthy     *prometheus.GaugeVec
	evictions     *prometheus.CounterVec
	nodeHealthDur prometheus.Histogram
	allHealthDur  prometheus.Histogram
	zoneRate      *prometheus.GaugeVec
	paused        *prometheus.GaugeVec
	partition     prometheus.Gauge
	// stateOps counts reads and writes of the state kept for the next leader (handover.go),
	// by op (read, write) and result (ok, conflict, error).
	stateOps *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *controllerMetrics {
	f := metrics.With(reg)
	m := &controllerMetrics{
		zoneHealth: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_collector_zone_health",
			Help: "Percentage of healthy nodes per zone.",
		}, []string{"zone"}),
		zoneSize: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_collector_zone_size",
			Help: "Number of registered nodes per zone.",
		}, []string{"zone"}),
		unhealthy: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_collector_unhealthy_nodes_in_zone",
			Help: "Number of not Ready nodes per zone.",
		}, []string{"zone"}),
		evictions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "node_collector_evictions_total",
			Help: "Number of NoExecute taints (node evictions) applied since this process started leading, per zone.",
		}, []string{"zone"}),
		nodeHealthDur: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "node_collector_update_node_health_duration_seconds",
			Help:    "Time to update the health of one node.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		allHealthDur: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "node_collector_update_all_nodes_health_duration_seconds",
			Help:    "Time to update the health of all nodes.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 8),
		}),
		zoneRate: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kcm_split_nodelifecycle_zone_eviction_rate",
			Help: "Current NoExecute tainting rate per zone, nodes per second; 0 while paused.",
		}, []string{"zone"}),
		paused: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kcm_split_nodelifecycle_evictions_paused",
			Help: "1 while NoExecute tainting in a zone is paused, with the reason: PartialDisruption (a small zone mostly not Ready) or AllZonesDown.",
		}, []string{"zone", "reason"}),
		partition: f.NewGauge(prometheus.GaugeOpts{
			Name: "kcm_split_nodelifecycle_partition_suspected",
			Help: "1 while Nodes that fell silent together are held as this controller's suspected partition from them (--partition-unknown-fraction): no Pod marked not Ready, no taint.",
		}),
		stateOps: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kcm_split_nodelifecycle_state_operations_total",
			Help: "Reads and writes of the state kept for the next leader (the partition episode, each zone's last NoExecute taint) in the ConfigMap beside the Lease, by op and result (ok, conflict, error).",
		}, []string{"op", "result"}),
	}
	return m
}
