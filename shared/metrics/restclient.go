package metrics

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// client-go accepts exactly one set of REST metric sinks per process (metrics.Register is a
// sync.Once), so these collectors are process-wide and added to every registry built here.
// Names, labels and buckets are component-base's, for dashboard compatibility.
var (
	restOnce sync.Once

	restLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_duration_seconds",
		Help:    "Request latency in seconds. Broken down by verb, and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0},
	}, []string{"verb", "host"})
	restRateLimiter = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_rate_limiter_duration_seconds",
		Help:    "Client side rate limiter latency in seconds. Broken down by verb, and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0},
	}, []string{"verb", "host"})
	restResult = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Number of HTTP requests, partitioned by status code, method, and host.",
	}, []string{"code", "method", "host"})
)

type latencyAdapter struct{ h *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	a.h.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

type resultAdapter struct{ c *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.c.WithLabelValues(code, method, host).Inc()
}

// InstallClientGoSinks gives client-go this package's REST metric sinks, once per process. Call
// it before any client of the process sends a request: client-go reads its sinks without a lock,
// so sinks installed while another goroutine already sends requests race with them (two
// in-process runs of a binary, as the app tests start, one of them already talking).
func InstallClientGoSinks() {
	restOnce.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency:     latencyAdapter{restLatency},
			RateLimiterLatency: latencyAdapter{restRateLimiter},
			RequestResult:      resultAdapter{restResult},
		})
	})
}

func registerRESTClientMetrics(reg prometheus.Registerer) {
	InstallClientGoSinks()
	Register(reg, restLatency)
	Register(reg, restRateLimiter)
	Register(reg, restResult)
}
