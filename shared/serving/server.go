package serving

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// Server is a running secure server.
type Server struct {
	srv  *http.Server
	addr net.Addr
}

// Addr is the address the server listens on (the chosen one when the port was 0).
func (s *Server) Addr() net.Addr { return s.addr }

// Shutdown stops accepting connections and waits up to ctx for open requests.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Start listens on o.Address() and serves handler behind authentication and authorization,
// plus /debug/pprof when o.Profiling is set. cfg is the controller's own client configuration,
// used for reviews unless a review kubeconfig is given. o must have been validated.
func Start(logger logr.Logger, o *Options, ttls CacheTTLs, cfg *rest.Config, reg prometheus.Registerer, handler http.Handler) (*Server, error) {
	tlsConfig := &tls.Config{MinVersion: tlsVersions[o.MinTLSVersion]}
	if o.certs == nil {
		cert, err := selfSigned(time.Now())
		if err != nil {
			return nil, fmt.Errorf("generating a self-signed serving certificate: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{*cert}
		logger.Info("No --"+FlagTLSCertFile+" given: serving a self-signed certificate generated at start",
			"sha256", Fingerprint(cert.Certificate[0]))
	} else {
		o.certs.setLogger(logger)
		tlsConfig.GetCertificate = o.certs.getCertificate
		logger.Info("Serving the given certificate, reloaded when its files change", "file", o.CertFile,
			"sha256", Fingerprint(o.certs.current().Certificate[0]))
	}

	authnClient, err := reviewClient(cfg, o.authnConfig, "authentication")
	if err != nil {
		return nil, err
	}
	authzClient, err := reviewClient(cfg, o.authzConfig, "authorization")
	if err != nil {
		return nil, err
	}
	requests := metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kcm_split_secure_serving_requests_total",
		Help: "Requests to the secure port by authentication and authorization decision.",
	}, []string{"decision"}))

	mux := http.NewServeMux()
	mux.Handle("/", handler)
	if o.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	protected := Protect(mux,
		NewTokenReviewer(authnClient, ttls),
		NewAccessReviewer(authzClient, ttls),
		o.AlwaysAllowPaths,
		func(d string) { requests.WithLabelValues(d).Inc() })

	ln, err := net.Listen("tcp", o.Address())
	if err != nil {
		return nil, fmt.Errorf("serving HTTPS on %s: %w", o.Address(), err)
	}
	s := &Server{
		srv: &http.Server{
			Handler:           protected,
			ReadHeaderTimeout: 10 * time.Second,
			TLSConfig:         tlsConfig,
			// TLS handshake failures (probes, port scans) are not worth more than a debug line.
			ErrorLog: log.New(logWriter{logger.V(2)}, "", 0),
		},
		addr: ln.Addr(),
	}
	logger.Info("Serving securely", "address", ln.Addr().String(), "profiling", o.Profiling)
	go func() {
		if err := s.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTPS server stopped", "address", ln.Addr().String())
		}
	}()
	return s, nil
}

// logWriter feeds the standard library's server log into logr.
type logWriter struct{ logger logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.logger.Info("HTTPS server", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}

// reviewClient is a client of its own for reviews, so they never queue behind the controller's
// requests under client-side throttling, and are told apart by user agent.
func reviewClient(cfg, own *rest.Config, purpose string) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	if own != nil {
		c = rest.CopyConfig(own)
	}
	c.UserAgent = cfg.UserAgent + "/" + purpose
	c.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(c)
}

// Fingerprint is the SHA-256 of a DER certificate, hex, as `openssl x509 -fingerprint -sha256`
// prints it without colons.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// selfSigned makes an ECDSA P-256 certificate for localhost, the loopback addresses and this
// host's name, valid for a year. Clients that verify certificates need a real one
// (--tls-cert-file); this one only encrypts.
func selfSigned(now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	names := []string{"localhost"}
	if host != "" && host != "localhost" {
		names = append(names, host)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", names[len(names)-1], now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              names,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
