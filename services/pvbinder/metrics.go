package pvbinder

import (
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// binderMetrics are the controller's own metrics: upstream's pv_collector_* gauges and
// retroactive_storageclass_* counters under their names, and the bind latency histogram.
type binderMetrics struct {
	bindLatency       prometheus.Histogram
	retroactive       prometheus.Counter
	retroactiveErrors prometheus.Counter
}

func newBinderMetrics(reg prometheus.Registerer, pvs corelisters.PersistentVolumeLister, claims corelisters.PersistentVolumeClaimLister) *binderMetrics {
	f := metrics.With(reg)
	m := &binderMetrics{
		bindLatency: f.NewHistogram(prometheus.HistogramOpts{
			Name: "kcm_split_pvbinder_claim_bind_duration_seconds",
			Help: "Time from a PersistentVolumeClaim's creation until this controller observes it Bound, for claims that became Bound while it ran.",
			// 10 ms to about 11 minutes: a bind takes milliseconds at best, and a claim
			// waiting for a provisioner or a PV may wait minutes.
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 17),
		}),
		retroactive: f.NewCounter(prometheus.CounterOpts{
			Name: "retroactive_storageclass_total",
			Help: "Total number of retroactive StorageClass assignments to persistent volume claim",
		}),
		retroactiveErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "retroactive_storageclass_errors_total",
			Help: "Total number of failed retroactive StorageClass assignments to persistent volume claim",
		}),
	}
	if reg != nil {
		metrics.Register(reg, &countCollector{pvs: pvs, claims: claims})
	}
	return m
}

var (
	totalPVDesc = prometheus.NewDesc("pv_collector_total_pv_count",
		"Gauge measuring total number of persistent volumes", []string{"plugin_name", "volume_mode"}, nil)
	boundPVDesc = prometheus.NewDesc("pv_collector_bound_pv_count",
		"Gauge measuring number of persistent volume currently bound", []string{"storage_class"}, nil)
	unboundPVDesc = prometheus.NewDesc("pv_collector_unbound_pv_count",
		"Gauge measuring number of persistent volume currently unbound", []string{"storage_class"}, nil)
	boundPVCDesc = prometheus.NewDesc("pv_collector_bound_pvc_count",
		"Gauge measuring number of persistent volume claim currently bound", []string{"namespace", "storage_class", "volume_attributes_class"}, nil)
	unboundPVCDesc = prometheus.NewDesc("pv_collector_unbound_pvc_count",
		"Gauge measuring number of persistent volume claim currently unbound", []string{"namespace", "storage_class", "volume_attributes_class"}, nil)
)

// countCollector computes upstream's PV and claim counts from the informer caches at
// scrape time, so they cost nothing between scrapes and are never stale.
type countCollector struct {
	pvs    corelisters.PersistentVolumeLister
	claims corelisters.PersistentVolumeClaimLister
}

func (c *countCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- totalPVDesc
	ch <- boundPVDesc
	ch <- unboundPVDesc
	ch <- boundPVCDesc
	ch <- unboundPVCDesc
}

func (c *countCollector) Collect(ch chan<- prometheus.Metric) {
	type pluginMode struct{ plugin, mode string }
	total := map[pluginMode]int{}
	bound, unbound := map[string]int{}, map[string]int{}
	pvs, _ := c.pvs.List(labels.Everything())
	for _, pv := range pvs {
		total[pluginMode{pluginName(pv), string(ptr.Deref(pv.Spec.VolumeMode, v1.PersistentVolumeFilesystem))}]++
		if pv.Status.Phase == v1.VolumeBound {
			bound[pv.Spec.StorageClassName]++
		} else {
			unbound[pv.Spec.StorageClassName]++
		}
	}
	for k, n := range total {
		ch <- prometheus.MustNewConstMetric(totalPVDesc, prometheus.GaugeValue, float64(n), k.plugin, k.mode)
	}
	for class, n := range bound {
		ch <- prometheus.MustNewConstMetric(boundPVDesc, prometheus.GaugeValue, float64(n), class)
	}
	for class, n := range unbound {
		ch <- prometheus.MustNewConstMetric(unboundPVDesc, prometheus.GaugeValue, float64(n), class)
	}

	type dims struct{ namespace, class, vac string }
	boundC, unboundC := map[dims]int{}, map[dims]int{}
	claims, _ := c.claims.List(labels.Everything())
	for _, claim := range claims {
		d := dims{claim.Namespace, storagehelpers.GetPersistentVolumeClaimClass(claim), ptr.Deref(claim.Spec.VolumeAttributesClassName, "")}
		if claim.Status.Phase == v1.ClaimBound {
			boundC[d]++
		} else {
			unboundC[d]++
		}
	}
	for d, n := range boundC {
		ch <- prometheus.MustNewConstMetric(boundPVCDesc, prometheus.GaugeValue, float64(n), d.namespace, d.class, d.vac)
	}
	for d, n := range unboundC {
		ch <- prometheus.MustNewConstMetric(unboundPVCDesc, prometheus.GaugeValue, float64(n), d.namespace, d.class, d.vac)
	}
}

// pluginName names the volume plugin of a PV's source the way upstream labels
// pv_collector_total_pv_count: CSI volumes with their driver, the common in-tree sources by
// plugin name, anything else "N/A".
func pluginName(pv *v1.PersistentVolume) string {
	s := pv.Spec.PersistentVolumeSource
	switch {
	case s.CSI != nil:
		return "kubernetes.io/csi:" + s.CSI.Driver
	case s.HostPath != nil:
		return "kubernetes.io/host-path"
	case s.Local != nil:
		return "kubernetes.io/local-volume"
	case s.NFS != nil:
		return "kubernetes.io/nfs"
	case s.ISCSI != nil:
		return "kubernetes.io/iscsi"
	case s.FC != nil:
		return "kubernetes.io/fc"
	}
	return "N/A"
}
