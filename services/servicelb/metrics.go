package servicelb

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/services/servicelb/allocation"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"

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

// gaugeView shows the allocation state's numbers: the pool usage, pending and unverified
// gauges. Decisions are published after the state's lock is released, so mu and the seqs
// shown keep an older snapshot from overwriting a newer one.
type gaugeView struct {
	m *controllerMetrics
	// apis are the pool APIs read, in order: each always shows a series without a pool.
	apis []string

	mu                     sync.Mutex
	allShown, pendingShown uint64
	// The label sets shown, so that a pool's series go when the pool does.
	shownPools, shownFree, shownUnverified, shownPending map[[3]string]bool
}

func newGaugeView(m *controllerMetrics, apis []string) *gaugeView {
	return &gaugeView{m: m, apis: apis}
}

// show sets the gauges to g unless a later decision's numbers were shown already. A series
// whose pool (or reason) is gone is deleted, not left at its last value.
func (v *gaugeView) show(g allocation.Gauges) {
	if g.Level == allocation.GaugesNone {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if g.Level == allocation.GaugesAll && g.Seq > v.allShown {
		v.allShown = g.Seq
		v.showPools(g.Totals)
	}
	if g.Seq > v.pendingShown {
		v.pendingShown = g.Seq
		// Per pool API, a series without pool and reason is 0 while nothing waits, so a
		// dashboard or an alert sees 0, not "no data".
		pending := map[[3]string]float64{}
		for _, api := range v.apis {
			pending[[3]string{api, "", ""}] += 0
		}
		for l, n := range g.Pending {
			pending[[3]string{l.API, l.Pool, l.Reason}] += float64(n)
		}
		v.shownPending = showVec(v.m.pending, 3, v.shownPending, pending)
	}
}

// showPools shows the usage and unverified gauges of t; mu is held.
func (v *gaugeView) showPools(t allocation.Totals) {
	pools := map[[3]string]float64{}
	free := map[[3]string]float64{}
	for key, st := range t.Pools {
		api, pool := poolsource.Labels(key)
		pools[[3]string{"IPv4", api, pool}] = float64(st.AssignedIPv4)
		pools[[3]string{"IPv6", api, pool}] = float64(st.AssignedIPv6)
		free[[3]string{"IPv4", api, pool}] = float64(st.AvailableIPv4)
		free[[3]string{"IPv6", api, pool}] = float64(st.AvailableIPv6)
	}
	v.shownPools = showVec(v.m.assigned, 3, v.shownPools, pools)
	v.shownFree = showVec(v.m.available, 3, v.shownFree, free)
	// Each pool API always shows an unknown-pool series (0 when none), so a dashboard or an
	// alert sees 0, not "no data", when nothing is unverified.
	unverified := map[[3]string]float64{}
	for _, api := range v.apis {
		unverified[[3]string{api, ""}] += 0
	}
	for key, n := range t.Unverified {
		api, pool := v.apis[0], ""
		if key != "" {
			api, pool = poolsource.Labels(key)
		}
		unverified[[3]string{api, pool}] += float64(n)
	}
	v.shownUnverified = showVec(v.m.unverified, 2, v.shownUnverified, unverified)
}

// showVec sets vec's series to values (the first n of each key are its label values) and
// deletes those of shown that are no longer there; it returns what is shown.
func showVec(vec *prometheus.GaugeVec, n int, shown map[[3]string]bool, values map[[3]string]float64) map[[3]string]bool {
	now := make(map[[3]string]bool, len(values))
	for k, v := range values {
		vec.WithLabelValues(k[:n]...).Set(v)
		now[k] = true
	}
	for k := range shown {
		if !now[k] {
			vec.DeleteLabelValues(k[:n]...)
		}
	}
	return now
}
