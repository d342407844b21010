package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/shared/health"
	"github.com/kcm-split/kcm-split/shared/metrics"
)

type servers struct{ list []*http.Server }

func (s *servers) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range s.list {
		_ = srv.Shutdown(ctx)
	}
}

// disabled reports whether addr asks for no server (port 0).
func disabled(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// serve starts the metrics and health endpoints: one server when both flags name the same
// address (the default), two otherwise; port 0 disables either.
func serve(ctx context.Context, logger logr.Logger, o options, reg *prometheus.Registry, checks *health.Checks) (*servers, error) {
	healthAddr := o.health
	if healthAddr == "" {
		healthAddr = o.metrics
	}
	muxes := map[string]*http.ServeMux{}
	mux := func(addr string) *http.ServeMux {
		if m, ok := muxes[addr]; ok {
			return m
		}
		m := http.NewServeMux()
		muxes[addr] = m
		return m
	}
	if !disabled(o.metrics) {
		mux(o.metrics).Handle("/metrics", metrics.Handler(reg))
	}
	if !disabled(healthAddr) {
		checks.Install(mux(healthAddr))
	}
	s := &servers{}
	for addr, m := range muxes {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			s.shutdown()
			return nil, fmt.Errorf("serving metrics and health on %s: %w", addr, err)
		}
		srv := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
		s.list = append(s.list, srv)
		logger.Info("Serving", "address", ln.Addr().String())
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "HTTP server stopped", "address", addr)
			}
		}()
	}
	return s, nil
}
