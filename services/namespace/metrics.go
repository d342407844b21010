package namespace

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// controllerMetrics are this controller's own series (upstream has none for namespaces).
type controllerMetrics struct {
	// duration is deletion timestamp to finalized, per namespace.
	duration prometheus.Histogram
	// deleted counts objects this controller asked the apiserver to delete, by resource
	// ("configmaps.", "widgets.example.com"): bounded by the cluster's API surface.
	deleted *prometheus.CounterVec
	// stopped counts syncs that stopped because the namespace was gone or
	// replaced when checked before a delete, by reason (StopGone, StopReplaced).
	stopped *prometheus.CounterVec
	// discoveries counts discoveries by result (complete, partial, failed).
	discoveries *prometheus.CounterVec
	// unavailable is the number of group versions the latest discovery could not reach,
	// by what their last good discovery said (none, holds_objects, holds_nothing).
	unavailable *prometheus.GaugeVec
	// storeOps counts reads and writes of the discovery memory kept in the cluster, by
	// op (read, write) and result (ok, conflict, error).
	storeOps *prometheus.CounterVec
	// finalizedUnavailable counts namespaces finalized under
	// --allow-deletion-with-unavailable-groups while some APIs did not answer.
	finalizedUnavailable prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, namespaces corelisters.NamespaceLister) *controllerMetrics {
	f := metrics.With(reg)
	m := &controllerMetrics{
		duration: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: "kcm_split",
			Subsystem: MetricsSubsystem,
			Name:      "deletion_duration_seconds",
			Help:      "Time from a namespace's deletion timestamp until this controller finalized it.",
			// 1s .. about 4.5h: from an empty namespace to one draining for hours.
			Buckets: prometheus.ExponentialBuckets(1, 2.5, 12),
		}),
		deleted: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kcm_split",
			Subsystem: MetricsSubsystem,
			Name:      "objects_deleted_total",
			Help:      "Objects in terminating namespaces this controller asked the apiserver to delete, by resource (<resource>.<group>).",
		}, []string{"resource"}),
		stopped: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kcm_split",
			Subsystem: MetricsSubsystem,
			Name:      "deletion_stopped_total",
			Help:      "Deletion passes stopped before deleting more content because the namespace was gone or replaced by a new one of the same name (reason gone|replaced).",
		}, []string{"reason"}),
	}
	m.discoveries = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kcm_split",
		Subsystem: MetricsSubsystem,
		Name:      "discoveries_total",
		Help:      "Discoveries of the served resources, by result: complete, partial (some group versions did not answer), failed.",
	}, []string{"result"})
	m.unavailable = f.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "kcm_split",
		Subsystem: MetricsSubsystem,
		Name:      "unavailable_group_versions",
		Help:      "API group versions the latest discovery could not reach, by what their last successful discovery served (seen by this process, or kept by the previous Lease holder with --allow-deletion-with-unavailable-groups): none (never discovered), holds_objects (namespaced resources that can be listed or deleted), holds_nothing.",
	}, []string{"last_discovery"})
	m.storeOps = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kcm_split",
		Subsystem: MetricsSubsystem,
		Name:      "discovery_memory_operations_total",
		Help:      "Reads and writes of the discovery memory the Lease holder keeps in a ConfigMap for the next holder (--allow-deletion-with-unavailable-groups), by op (read, write) and result (ok, conflict, error).",
	}, []string{"op", "result"})
	m.finalizedUnavailable = f.NewCounter(prometheus.CounterOpts{
		Namespace: "kcm_split",
		Subsystem: MetricsSubsystem,
		Name:      "finalized_with_unavailable_apis_total",
		Help:      "Namespaces finalized while some API group versions did not answer discovery, allowed by --allow-deletion-with-unavailable-groups.",
	})
	for _, r := range []string{StopGone, StopReplaced} {
		m.stopped.WithLabelValues(r)
	}
	for _, r := range []string{"complete", "partial", "failed"} {
		m.discoveries.WithLabelValues(r)
	}
	for _, s := range []string{LastDiscoveryNone, LastDiscoveryHoldsObjects, LastDiscoveryHoldsNothing} {
		m.unavailable.WithLabelValues(s)
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "kcm_split",
		Subsystem: MetricsSubsystem,
		Name:      "terminating",
		Help:      "Namespaces that have a deletion timestamp and still exist, as this controller's cache sees them.",
	}, func() float64 {
		n, _ := terminatingStats(namespaces, time.Now())
		return float64(n)
	})
	// The age of the oldest one is what tells a stuck deletion from steady churn, which keeps
	// the count above zero without any namespace waiting long (the KcmSplitNamespaceStuckTerminating alert).
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "kcm_split",
		Subsystem: MetricsSubsystem,
		Name:      "oldest_terminating_seconds",
		Help:      "Seconds since the deletion timestamp of the oldest namespace that still exists, as this controller's cache sees them; 0 when none is terminating.",
	}, func() float64 {
		_, oldest := terminatingStats(namespaces, time.Now())
		return oldest.Seconds()
	})
	return m
}

// terminatingStats counts the namespaces with a deletion timestamp and returns how long ago
// the oldest one's was set (0 for none; a failed list also reads as none).
func terminatingStats(namespaces corelisters.NamespaceLister, now time.Time) (int, time.Duration) {
	all, err := namespaces.List(labels.Everything())
	if err != nil {
		return 0, 0
	}
	n, oldest := 0, time.Duration(0)
	for _, ns := range all {
		if ns.DeletionTimestamp == nil {
			continue
		}
		n++
		oldest = max(oldest, now.Sub(ns.DeletionTimestamp.Time))
	}
	return n, oldest
}
