package ipam

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// ipamMetrics are upstream's node_ipam_controller_cidrset_* metrics, labelled by cluster
// CIDR (at most two values), and kcm-split's count of Nodes waiting for a range.
type ipamMetrics struct {
	allocations *prometheus.CounterVec
	releases    *prometheus.CounterVec
	usage       *prometheus.GaugeVec
	max         *prometheus.GaugeVec
	tries       *prometheus.HistogramVec
	waiting     prometheus.Gauge
	free        *prometheus.GaugeVec
	// claimCollisions counts ranges found claimed by someone else when this allocator went
	// to claim them: another allocator runs (a split brain), or this one's view was behind.
	claimCollisions prometheus.Counter
}

const subsystem = "node_ipam_controller"

func newMetrics(reg prometheus.Registerer) *ipamMetrics {
	f := metrics.With(reg)
	labels := []string{"clusterCIDR"}
	m := &ipamMetrics{
		allocations: f.NewCounterVec(prometheus.CounterOpts{
			Subsystem: subsystem, Name: "cidrset_cidrs_allocations_total",
			Help: "Ranges taken: handed to a Node, or found on a Node or in the Service range and marked used.",
		}, labels),
		releases: f.NewCounterVec(prometheus.CounterOpts{
			Subsystem: subsystem, Name: "cidrset_cidrs_releases_total",
			Help: "Ranges freed.",
		}, labels),
		usage: f.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: subsystem, Name: "cidrset_usage_cidrs",
			Help: "Fraction (0..1) of the cluster CIDR's ranges in use.",
		}, labels),
		// Upstream's name, misspelling included, so that its queries keep working.
		max: f.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: subsystem, Name: "cirdset_max_cidrs",
			Help: "Number of ranges the cluster CIDR holds.",
		}, labels),
		tries: f.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: subsystem, Name: "cidrset_allocation_tries_per_request",
			Help:    "Ranges in use passed over to find a free one, per allocation.",
			Buckets: prometheus.ExponentialBuckets(1, 5, 5),
		}, labels),
		waiting: f.NewGauge(prometheus.GaugeOpts{
			Name: "kcm_split_nodelifecycle_nodes_waiting_for_cidr",
			Help: "Nodes without a Pod range because their cluster CIDR has no free range; each gets one as soon as one is freed.",
		}),
		free: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kcm_split_nodelifecycle_cidr_free_ranges",
			Help: "Ranges of the cluster CIDR free to hand to new Nodes.",
		}, labels),
		claimCollisions: f.NewCounter(prometheus.CounterOpts{
			Name: "kcm_split_nodelifecycle_cidr_claim_collisions_total",
			Help: "Ranges this allocator went to claim for a Node and found claimed by someone else (another allocator), so it took another.",
		}),
	}
	return m
}
