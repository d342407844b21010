package tainteviction

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// controllerMetrics are upstream's taint_eviction_controller_* metrics; nothing is labelled
// per Pod.
type controllerMetrics struct {
	podDeletions   prometheus.Counter
	podDeletionDur prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *controllerMetrics {
	f := metrics.With(reg)
	return &controllerMetrics{
		podDeletions: f.NewCounter(prometheus.CounterOpts{
			Name: "taint_eviction_controller_pod_deletions_total",
			Help: "Pods deleted because they do not tolerate a NoExecute taint of their node.",
		}),
		podDeletionDur: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "taint_eviction_controller_pod_deletion_duration_seconds",
			Help:    "Time from when a Pod's eviction was due until its deletion was accepted.",
			Buckets: []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240},
		}),
	}
}
