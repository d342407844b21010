package quota

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// Outcomes of one quota sync, the values of the outcome label.
const (
	// OutcomeUpdated: status written.
	OutcomeUpdated = "updated"
	// OutcomeUnchanged: status already right; nothing written.
	OutcomeUnchanged = "unchanged"
	// OutcomePartial: at least one resource type could not be counted; its usage kept its
	// last value and the rest was published (written or already right).
	OutcomePartial = "partial"
	// OutcomeDeferred: a tracked type's informer is still listing; the quota is synced when
	// it has synced or given up (--resource-quota-informer-sync-timeout).
	OutcomeDeferred = "deferred"
	// OutcomeConflict: the write lost a race with admission or another writer; retried.
	OutcomeConflict = "conflict"
	// OutcomeError: any other failure; retried with backoff.
	OutcomeError = "error"
)

type controllerMetrics struct {
	syncs *prometheus.CounterVec
}

// newMetrics registers the controller's own metrics into reg (nil: unregistered).
func newMetrics(reg prometheus.Registerer, failing func() float64) *controllerMetrics {
	f := metrics.With(reg)
	m := &controllerMetrics{
		syncs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kcm_split_quota_syncs_total",
			Help: "ResourceQuota syncs by outcome (updated, unchanged, partial, deferred, conflict, error).",
		}, []string{"outcome"}),
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kcm_split_quota_uncountable_resource_types",
		Help: "Resource types tracked by some quota whose informer has not synced within the sync timeout.",
	}, failing)
	for _, o := range []string{OutcomeUpdated, OutcomeUnchanged, OutcomePartial, OutcomeDeferred, OutcomeConflict, OutcomeError} {
		m.syncs.WithLabelValues(o)
	}
	return m
}
