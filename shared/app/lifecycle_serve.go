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
	"k8s.io/client-go/rest"

	"github.com/kcm-split/kcm-split/shared/health"
	"github.com/kcm-split/kcm-split/shared/metrics"
	"github.com/kcm-split/kcm-split/shared/serving"
)

// servers are the running HTTP(S) servers, stopped together.
type servers struct {
	list []interface {
		Shutdown(context.Context) error
	}
}

func (s *servers) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range s.list {
		_ = srv.Shutdown(ctx)
	}
}

// disabled reports whether addr asks for no plain server: empty or port 0.
func disabled(addr string) bool {
	if addr == "" {
		return true
	}
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// serve starts the secure server (metrics and health behind authentication and authorization,
// the default) and, only when asked for, the plain-HTTP ones: one server when the metrics and
// health flags name the same address, two otherwise.
func serve(logger logr.Logger, o servingOptions, cfg *rest.Config, reg *prometheus.Registry, term prometheus.Gatherer, checks *health.Checks) (*servers, error) {
	s := &servers{}
	if o.secure.Enabled() {
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler(reg, term))
		checks.Install(mux)
		srv, err := serving.Start(logger, &o.secure, o.ttls, cfg, reg, mux)
		if err != nil {
			return nil, err
		}
		s.list = append(s.list, srv)
	}

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
		mux(o.metrics).Handle("/metrics", metrics.Handler(reg, term))
	}
	if !disabled(healthAddr) {
		checks.Install(mux(healthAddr))
	}
	for addr, m := range muxes {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			s.shutdown()
			return nil, fmt.Errorf("serving metrics and health on %s: %w", addr, err)
		}
		srv := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
		s.list = append(s.list, srv)
		logger.Info("Serving plain HTTP, without authentication", "address", ln.Addr().String())
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "HTTP server stopped", "address", addr)
			}
		}()
	}
	if len(s.list) == 0 {
		logger.Info("Serving nothing: --" + serving.FlagSecurePort + " is 0 and no plain address is set; probes and scrapes will fail")
	}
	return s, nil
}
