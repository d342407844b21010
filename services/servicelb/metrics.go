package servicelb

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// controllerMetrics are upstream's service_controller_* series plus kcm-split's own. None
// has a per-object label.
type controllerMetrics struct {
	lbSync         prometheus.Counter
	nodeSyncError  prometheus.Counter
	nodeSyncTime   prometheus.Histogram
	hostUpdate     prometheus.Histogram
	pending        *prometheus.GaugeVec
	nodes          prometheus.Gauge
	assigned       *prometheus.GaugeVec
	available      *prometheus.GaugeVec
	unverified     *prometheus.GaugeVec
	conflicts      *prometheus.CounterVec
	claimConflicts prometheus.Counter
}

// Kinds of kcm_split_servicelb_write_conflicts_total.
const (
	// conflictStale: a conditioned Service write failed, the Service had changed.
	conflictStale = "stale"
	// conflictOverwritten: the status this controller wrote was changed by someone else
	// and is being restored (with backoff).
	conflictOverwritten = "overwritten"
	// conflictPoolStatus: a pool status update failed on a conflict.
	conflictPoolStatus = "pool_status"
)

func newMetrics(reg prometheus.Registerer) *controllerMetrics {
	f := metrics.With(reg)
	m := &controllerMetrics{
		lbSync: f.NewCounter(prometheus.CounterOpts{
			Name: "service_controller_loadbalancer_sync_total",
			Help: "Load balancers configured (address assigned, moved or released), as an effect of Service, pool or node changes.",
		}),
		nodeSyncError: f.NewCounter(prometheus.CounterOpts{
			Name: "service_controller_nodesync_error_total",
			Help: "Node syncs that failed.",
		}),
		nodeSyncTime: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "service_controller_nodesync_latency_seconds",
			Help:    "Time a node sync took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		hostUpdate: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "service_controller_update_loadbalancer_host_latency_seconds",
			Help:    "Time to update one load balancer's hosts after the eligible node set changed.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		pending: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kcm_split_servicelb_pending_services",
			Help: "LoadBalancer Services waiting for an address, by the pool they name (\"\" if none) and its api (the api read first if none), and the reason they wait (PoolExhausted, NoMatchingPool, RequestedIPNotInPool, SharingConflict, InvalidRequest, PoolAPIUnavailable).",
		}, []string{"api", "pool", "reason"}),
		nodes: f.NewGauge(prometheus.GaugeOpts{
			Name: "kcm_split_servicelb_eligible_nodes",
			Help: "Nodes eligible for load balancing (not excluded by label, not being deleted).",
		}),
		assigned: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kcm_split_servicelb_addresses_assigned",
			Help: "Addresses of valid pools held by Services, by family, pool API (kcm-split, metallb) and pool (a shared address counts once).",
		}, []string{"family", "api", "pool"}),
		available: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kcm_split_servicelb_addresses_available",
			Help: "Free addresses of valid pools, by family, pool API and pool (saturates at 2^63-1).",
		}, []string{"family", "api", "pool"}),
		unverified: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kcm_split_servicelb_unverified_addresses",
			Help: "Addresses kept in Service status (and reserved) that no pool vouches for now (pool API absent or not synced, pool deleted or invalid), by the pool that last did (\"\" if none) and its api.",
		}, []string{"api", "pool"}),
		conflicts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kcm_split_servicelb_write_conflicts_total",
			Help: "Writes that met another writer, by kind: stale (a conditioned write got a conflict), overwritten (our status was changed by someone else), pool_status.",
		}, []string{"kind"}),
		claimConflicts: f.NewCounter(prometheus.CounterOpts{
			Name: "kcm_split_servicelb_claim_conflicts_total",
			Help: "Addresses found claimed (IPAddress) by another Service when this controller tried to claim them.",
		}),
	}
	for _, k := range []string{conflictStale, conflictOverwritten, conflictPoolStatus} {
		m.conflicts.WithLabelValues(k)
	}
	return m
}
