// Package metrics owns a binary's Prometheus registry and the providers that feed it:
// workqueue metrics under upstream names, client-go REST client metrics, and the handler.
//
// Everything registers into a registry passed in; nothing registers in init(). The one
// exception forced on us is client-go's REST metrics hook, which is process-global: its
// collectors are created once per process and added to every registry built here.
package metrics

import (
	"errors"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// NewRegistry returns a registry with the Go runtime, process and client-go REST collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	registerRESTClientMetrics(reg)
	return reg
}

// Handler serves reg, and each of more, in the Prometheus exposition format.
func Handler(reg *prometheus.Registry, more ...prometheus.Gatherer) http.Handler {
	g := append(prometheus.Gatherers{reg}, more...)
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
}

// TermRegistry holds the registry of the current term of leadership: a controller registers
// its metrics afresh in each term (a restart without the restart), so none of them outlives
// the caches it reads, and a standby exports none. It is a Gatherer for Handler.
type TermRegistry struct {
	cur atomic.Pointer[prometheus.Registry]
}

// Begin starts a term with an empty registry and returns it.
func (t *TermRegistry) Begin() *prometheus.Registry {
	r := prometheus.NewRegistry()
	t.cur.Store(r)
	return r
}

// End drops the term's registry: its metrics are no longer served.
func (t *TermRegistry) End() { t.cur.Store(nil) }

// Gather gathers the current term's registry, if any.
func (t *TermRegistry) Gather() ([]*dto.MetricFamily, error) {
	r := t.cur.Load()
	if r == nil {
		return nil, nil
	}
	return r.Gather()
}

// Register registers c into reg, or returns the collector already registered under the same
// descriptors. It lets two components of one process (or two controllers in one test binary)
// ask for the same metric without a panic.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// Factory makes collectors already registered in its registry, as they are declared:
// promauto's shape, with Register's answer to a metric asked for twice (the collector already
// registered) where promauto panics. A Factory of a nil registry registers nothing.
type Factory struct{ reg prometheus.Registerer }

// With returns the Factory of reg.
func With(reg prometheus.Registerer) Factory { return Factory{reg: reg} }

func register[C prometheus.Collector](f Factory, c C) C {
	if f.reg == nil {
		return c
	}
	return Register(f.reg, c)
}

// NewCounter makes and registers a counter.
func (f Factory) NewCounter(o prometheus.CounterOpts) prometheus.Counter {
	return register(f, prometheus.NewCounter(o))
}

// NewCounterVec makes and registers a counter vector.
func (f Factory) NewCounterVec(o prometheus.CounterOpts, labels []string) *prometheus.CounterVec {
	return register(f, prometheus.NewCounterVec(o, labels))
}

// NewGauge makes and registers a gauge.
func (f Factory) NewGauge(o prometheus.GaugeOpts) prometheus.Gauge {
	return register(f, prometheus.NewGauge(o))
}

// NewGaugeVec makes and registers a gauge vector.
func (f Factory) NewGaugeVec(o prometheus.GaugeOpts, labels []string) *prometheus.GaugeVec {
	return register(f, prometheus.NewGaugeVec(o, labels))
}

// NewGaugeFunc makes and registers a gauge whose value fn reads at each scrape.
func (f Factory) NewGaugeFunc(o prometheus.GaugeOpts, fn func() float64) prometheus.GaugeFunc {
	return register(f, prometheus.NewGaugeFunc(o, fn))
}

// NewHistogram makes and registers a histogram.
func (f Factory) NewHistogram(o prometheus.HistogramOpts) prometheus.Histogram {
	return register(f, prometheus.NewHistogram(o))
}

// NewHistogramVec makes and registers a histogram vector.
func (f Factory) NewHistogramVec(o prometheus.HistogramOpts, labels []string) *prometheus.HistogramVec {
	return register(f, prometheus.NewHistogramVec(o, labels))
}
