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
