package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Workqueue metric names and buckets match component-base's workqueue provider, so the
// queries of upstream dashboards work unchanged.
const workqueueSubsystem = "workqueue"

type workqueueProvider struct {
	adds, retries                   *prometheus.CounterVec
	depthG                          *prometheus.GaugeVec
	latency, workDuration           *prometheus.HistogramVec
	unfinished, longestRunningProcs *prometheus.GaugeVec
}

// WorkqueueProvider returns a workqueue.MetricsProvider that records into reg. Queues pick it
// up through TypedRateLimitingQueueConfig.MetricsProvider, so no global provider is set.
func WorkqueueProvider(reg prometheus.Registerer) workqueue.MetricsProvider {
	name := []string{"name"}
	return &workqueueProvider{
		depthG: Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: workqueueSubsystem, Name: "depth",
			Help: "Current depth of workqueue",
		}, name)),
		adds: Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: workqueueSubsystem, Name: "adds_total",
			Help: "Total number of adds handled by workqueue",
		}, name)),
		latency: Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: workqueueSubsystem, Name: "queue_duration_seconds",
			Help:    "How long in seconds an item stays in workqueue before being requested.",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 10),
		}, name)),
		workDuration: Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: workqueueSubsystem, Name: "work_duration_seconds",
			Help:    "How long in seconds processing an item from workqueue takes.",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 10),
		}, name)),
		unfinished: Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: workqueueSubsystem, Name: "unfinished_work_seconds",
			Help: "How many seconds of work has done that is in progress and hasn't been observed by work_duration. " +
				"Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
		}, name)),
		longestRunningProcs: Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: workqueueSubsystem, Name: "longest_running_processor_seconds",
			Help: "How many seconds has the longest running processor for workqueue been running.",
		}, name)),
		retries: Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: workqueueSubsystem, Name: "retries_total",
			Help: "Total number of retries handled by workqueue",
		}, name)),
	}
}

func (p *workqueueProvider) NewDepthMetric(n string) workqueue.GaugeMetric {
	return p.depthG.WithLabelValues(n)
}
func (p *workqueueProvider) NewAddsMetric(n string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(n)
}
func (p *workqueueProvider) NewLatencyMetric(n string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(n)
}
func (p *workqueueProvider) NewWorkDurationMetric(n string) workqueue.HistogramMetric {
	return p.workDuration.WithLabelValues(n)
}
func (p *workqueueProvider) NewUnfinishedWorkSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(n)
}
func (p *workqueueProvider) NewLongestRunningProcessorSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return p.longestRunningProcs.WithLabelValues(n)
}
func (p *workqueueProvider) NewRetriesMetric(n string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(n)
}
