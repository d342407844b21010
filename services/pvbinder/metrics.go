package pvbinder

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// binderMetrics are the controller's own metrics: upstream's pv_collector_* gauges,
// retroactive_storageclass_* counters and volume operation metrics under their names, and
// the bind latency histogram.
type binderMetrics struct {
	bindLatency       prometheus.Histogram
	retroactive       prometheus.Counter
	retroactiveErrors prometheus.Counter

	// End to end provision (until the claim is bound) and delete (until the PV is gone)
	// latency, and failed attempts, by plugin or provisioner name and operation.
	opSeconds          *prometheus.HistogramVec
	opErrors           *prometheus.CounterVec
	opErrorsDeprecated *prometheus.CounterVec
	// One in-tree plugin call (volume_provision, volume_delete) and its outcome.
	storageOpSeconds *prometheus.HistogramVec
}

// Upstream's buckets for the volume operation histograms: 100 ms to 10 minutes.
var volumeOperationBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600}

// Operation names, upstream's.
const (
	opProvision = "provision"
	opDelete    = "delete"
	// In-tree plugin calls, in storage_operation_duration_seconds.
	opVolumeProvision = "volume_provision"
	opVolumeDelete    = "volume_delete"
	// pluginUnknown labels an operation whose plugin or provisioner cannot be named.
	pluginUnknown = "N/A"
)

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
		opSeconds: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "volume_operation_total_seconds",
			Help:    "Storage operation end to end duration in seconds",
			Buckets: volumeOperationBuckets,
		}, []string{"plugin_name", "operation_name"}),
		opErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "volume_operation_errors_total",
			Help: "Total volume operation errors",
		}, []string{"plugin_name", "operation_name"}),
		// Deprecated upstream in 1.36 for volume_operation_errors_total and still exported
		// there, so dashboards of either name keep working.
		opErrorsDeprecated: f.NewCounterVec(prometheus.CounterOpts{
			Name: "volume_operation_total_errors",
			Help: "(Deprecated since 1.36.0) Total volume operation errors",
		}, []string{"plugin_name", "operation_name"}),
		storageOpSeconds: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "storage_operation_duration_seconds",
			Help:    "Storage operation duration",
			Buckets: volumeOperationBuckets,
		}, []string{"volume_plugin", "operation_name", "status", "migrated"}),
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

// observePluginCall records one call of an in-tree plugin (status success or
// fail-unknown, as upstream; never a migrated plugin: those are the CSI driver's).
func (m *binderMetrics) observePluginCall(plugin, op string, start time.Time, err error) {
	status := "success"
	if err != nil {
		status = "fail-unknown"
	}
	m.storageOpSeconds.WithLabelValues(plugin, op, status, strconv.FormatBool(false)).Observe(time.Since(start).Seconds())
}

// No library serves this: upstream's operation timestamp cache is in k8s.io/kubernetes itself.
//
// operationTimes holds when each provision (by claim key) or delete (by PV name) began, as
// upstream: the first attempt starts the clock, every failed attempt counts an error, and
// success (the claim bound, the PV gone) observes the end to end latency and forgets the
// entry. Entries of objects that disappear are dropped, so it holds at most one per
// unbound claim and released PV.
type operationTimes struct {
	m  *binderMetrics
	mu sync.Mutex
	ts map[string]operationStart
}

type operationStart struct {
	plugin, op string
	at         time.Time
}

func newOperationTimes(m *binderMetrics) *operationTimes {
	return &operationTimes{m: m, ts: map[string]operationStart{}}
}

// start begins key's operation unless one is under way.
func (o *operationTimes) start(key, plugin, op string) {
	if plugin == "" {
		plugin = pluginUnknown
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.ts[key]; !ok {
		o.ts[key] = operationStart{plugin: plugin, op: op, at: time.Now()}
	}
}

// end records the outcome of an attempt of key's operation, if one is under way: an error
// counts and keeps the clock running, success observes the latency and ends it.
func (o *operationTimes) end(key string, err error) {
	o.mu.Lock()
	s, ok := o.ts[key]
	if ok && err == nil {
		delete(o.ts, key)
	}
	o.mu.Unlock()
	if !ok {
		return
	}
	if err != nil {
		o.m.opErrors.WithLabelValues(s.plugin, s.op).Inc()
		o.m.opErrorsDeprecated.WithLabelValues(s.plugin, s.op).Inc()
		return
	}
	o.m.opSeconds.WithLabelValues(s.plugin, s.op).Observe(time.Since(s.at).Seconds())
}

// forget drops key's operation without recording anything (its claim is gone).
func (o *operationTimes) forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.ts, key)
}
