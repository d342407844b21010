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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// Handler serves reg in the Prometheus exposition format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
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
