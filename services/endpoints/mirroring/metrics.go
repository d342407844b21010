package mirroring

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// syncMetrics are upstream's endpoint_slice_mirroring_controller_* metrics, under the same
// names, help texts and buckets, so dashboards written for kube-controller-manager read them.
// Upstream declares them as vectors without labels; plain collectors expose the same series.
type syncMetrics struct {
	added, updated, removed, skipped prometheus.Histogram
	syncDuration                     prometheus.Histogram
	endpointsDesired                 prometheus.Gauge
	numSlices, desiredSlices         prometheus.Gauge
	changes                          *prometheus.CounterVec

	// Per Endpoints, what it was last reconciled to: endpoints and slices per slice key. The
	// three gauges are the sums over every Endpoints, kept as running totals.
	mu       sync.Mutex
	perKey   map[string]shape
	maxPerSl int
	totals   shape
}

// shape is what one Endpoints (or all of them) comes to: endpoints mirrored, slices
// holding them, and slices they would need if packed full.
type shape struct {
	endpoints, slices, desiredSlices int
}

const metricsSubsystem = "endpoint_slice_mirroring_controller"

func newSyncMetrics(reg prometheus.Registerer, maxPerSubset int) *syncMetrics {
	f := metrics.With(reg)
	perSync := func(name, help string) prometheus.Histogram {
		return f.NewHistogram(prometheus.HistogramOpts{Subsystem: metricsSubsystem, Name: name, Help: help,
			Buckets: prometheus.ExponentialBuckets(2, 2, 15)})
	}
	m := &syncMetrics{
		added:   perSync("endpoints_added_per_sync", "Number of endpoints added on each Endpoints sync"),
		updated: perSync("endpoints_updated_per_sync", "Number of endpoints updated on each Endpoints sync"),
		removed: perSync("endpoints_removed_per_sync", "Number of endpoints removed on each Endpoints sync"),
		skipped: perSync("addresses_skipped_per_sync",
			"Number of addresses skipped on each Endpoints sync due to being invalid or exceeding MaxEndpointsPerSubset"),
		syncDuration: f.NewHistogram(prometheus.HistogramOpts{Subsystem: metricsSubsystem, Name: "endpoints_sync_duration",
			Help: "Duration of syncEndpoints() in seconds", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}),
		endpointsDesired: f.NewGauge(prometheus.GaugeOpts{Subsystem: metricsSubsystem, Name: "endpoints_desired",
			Help: "Number of endpoints desired"}),
		numSlices: f.NewGauge(prometheus.GaugeOpts{Subsystem: metricsSubsystem, Name: "num_endpoint_slices",
			Help: "Number of EndpointSlices"}),
		desiredSlices: f.NewGauge(prometheus.GaugeOpts{Subsystem: metricsSubsystem, Name: "desired_endpoint_slices",
			Help: "Number of EndpointSlices that would exist with perfect endpoint allocation"}),
		changes: f.NewCounterVec(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: "changes",
			Help: "Number of EndpointSlice changes"}, []string{"operation"}),
		perKey:   map[string]shape{},
		maxPerSl: maxPerSubset,
	}
	return m
}

// record notes what the Endpoints key now mirrors to: endpoints per slice key (each key is
// one slice). An empty map forgets the key.
func (m *syncMetrics) record(key string, endpointsPerSlice []int) {
	var s shape
	for _, n := range endpointsPerSlice {
		if n == 0 {
			continue
		}
		s.endpoints += n
		s.slices++
		s.desiredSlices += int(math.Ceil(float64(n) / float64(m.maxPerSl)))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.perKey[key]
	if s == (shape{}) {
		delete(m.perKey, key)
	} else {
		m.perKey[key] = s
	}
	m.totals.endpoints += s.endpoints - old.endpoints
	m.totals.slices += s.slices - old.slices
	m.totals.desiredSlices += s.desiredSlices - old.desiredSlices
	m.endpointsDesired.Set(float64(m.totals.endpoints))
	m.numSlices.Set(float64(m.totals.slices))
	m.desiredSlices.Set(float64(m.totals.desiredSlices))
}
