// Package serving is the secure port every kcm-split binary serves /metrics, the health
// endpoints and (optionally) /debug/pprof on: HTTPS, with bearer tokens authenticated by
// TokenReview and requests authorized by SubjectAccessReview against the kube-apiserver, as
// kube-controller-manager's port 10257 does. Paths in AlwaysAllowPaths (the health endpoints by
// default) are served to anyone, so kubelet probes need no credentials.
package serving

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcm-split/kcm-split/shared/kube"
)

// Flag names, upstream's.
const (
	FlagSecurePort              = "secure-port"
	FlagBindAddress             = "bind-address"
	FlagTLSCertFile             = "tls-cert-file"
	FlagTLSPrivateKeyFile       = "tls-private-key-file"
	FlagTLSMinVersion           = "tls-min-version"
	FlagAuthenticationKubconfig = "authentication-kubeconfig"
	FlagAuthorizationKubconfig  = "authorization-kubeconfig"
	FlagAlwaysAllowPaths        = "authorization-always-allow-paths"
	FlagProfiling               = "profiling"
)

// DefaultAlwaysAllowPaths are served without authentication or authorization: kubelet
// probes carry no token. Upstream's default.
var DefaultAlwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}

// tlsVersions maps the names --tls-min-version accepts (upstream's) to crypto/tls values.
var tlsVersions = map[string]uint16{
	"VersionTLS12": tls.VersionTLS12,
	"VersionTLS13": tls.VersionTLS13,
}

// DefaultTLSMinVersion is the oldest protocol served unless --tls-min-version says otherwise.
// TLS 1.0 and 1.1 are not offered at all: no client that scrapes metrics needs them.
const DefaultTLSMinVersion = "VersionTLS12"

// Options configure the secure server.
type Options struct {
	// Port is the HTTPS port; 0 disables the secure server.
	Port int
	// BindAddress is the IP to listen on; empty means all interfaces.
	BindAddress string
	// CertFile and KeyFile hold a PEM certificate (chain) and its key, re-read when they
	// change (a renewal) without a restart. Both empty means a self-signed certificate
	// generated in memory at start.
	CertFile, KeyFile string
	// MinTLSVersion is VersionTLS12 or VersionTLS13.
	MinTLSVersion string
	// AuthenticationKubeconfig and AuthorizationKubeconfig point at the apiserver that answers
	// TokenReviews and SubjectAccessReviews; empty means the controller's own credentials.
	AuthenticationKubeconfig, AuthorizationKubeconfig string
	// AlwaysAllowPaths are served to anyone. An entry ending in "*" matches every path with
	// that prefix.
	AlwaysAllowPaths []string
	// Profiling serves /debug/pprof (authorized like /metrics).
	Profiling bool

	// Set by Validate: the certificate files' loader and review client configurations.
	certs                    *certLoader
	authnConfig, authzConfig *rest.Config
}

// Validate checks the options and loads the certificate, so that a missing or unreadable
// file is reported at start, naming its flag, instead of at the first request.
func (o *Options) Validate() error {
	if o.Port < 0 || o.Port > 65535 {
		return &kube.FlagError{Flag: FlagSecurePort, Err: fmt.Errorf("%d is not a port (0 disables the secure server)", o.Port)}
	}
	if o.BindAddress != "" && net.ParseIP(o.BindAddress) == nil {
		return &kube.FlagError{Flag: FlagBindAddress, Err: fmt.Errorf("%q is not an IP address", o.BindAddress)}
	}
	if o.MinTLSVersion == "" {
		o.MinTLSVersion = DefaultTLSMinVersion
	}
	if _, ok := tlsVersions[o.MinTLSVersion]; !ok {
		return &kube.FlagError{Flag: FlagTLSMinVersion, Err: fmt.Errorf("%q is not one of VersionTLS12, VersionTLS13", o.MinTLSVersion)}
	}
	for _, p := range o.AlwaysAllowPaths {
		if !strings.HasPrefix(p, "/") {
			return &kube.FlagError{Flag: FlagAlwaysAllowPaths, Err: fmt.Errorf("%q does not start with /", p)}
		}
		if i := strings.Index(p, "*"); i >= 0 && i != len(p)-1 {
			return &kube.FlagError{Flag: FlagAlwaysAllowPaths, Err: fmt.Errorf("%q: * is allowed only at the end", p)}
		}
	}
	var err error
	if o.authnConfig, err = loadKubeconfig(FlagAuthenticationKubconfig, o.AuthenticationKubeconfig); err != nil {
		return err
	}
	if o.authzConfig, err = loadKubeconfig(FlagAuthorizationKubconfig, o.AuthorizationKubeconfig); err != nil {
		return err
	}
	switch {
	case o.CertFile == "" && o.KeyFile == "":
		o.certs = nil
	case o.CertFile == "":
		return &kube.FlagError{Flag: FlagTLSCertFile, Err: errors.New("required with --" + FlagTLSPrivateKeyFile)}
	case o.KeyFile == "":
		return &kube.FlagError{Flag: FlagTLSPrivateKeyFile, Err: errors.New("required with --" + FlagTLSCertFile)}
	default:
		for flag, path := range map[string]string{FlagTLSCertFile: o.CertFile, FlagTLSPrivateKeyFile: o.KeyFile} {
			if _, err := os.Stat(path); err != nil {
				return &kube.FlagError{Flag: flag, Err: err}
			}
		}
		certs, err := newCertLoader(o.CertFile, o.KeyFile)
		if err != nil {
			return &kube.FlagError{Flag: FlagTLSCertFile, Err: err}
		}
		o.certs = certs
	}
	return nil
}

// loadKubeconfig reads a review kubeconfig; an empty path means none (nil).
func loadKubeconfig(flag, path string) (*rest.Config, error) {
	if path == "" {
		return nil, nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, &kube.FlagError{Flag: flag, Err: err}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, &kube.FlagError{Flag: flag, Err: err}
	}
	return cfg, nil
}

// Enabled reports whether the secure server runs.
func (o *Options) Enabled() bool { return o.Port != 0 }

// Address is the listen address, host:port.
func (o *Options) Address() string {
	return net.JoinHostPort(o.BindAddress, fmt.Sprint(o.Port))
}

// alwaysAllowed reports whether path is served without credentials.
func alwaysAllowed(paths []string, path string) bool {
	for _, p := range paths {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(path, prefix) {
				return true
			}
		} else if p == path {
			return true
		}
	}
	return false
}
