// Package kube builds the REST configuration and clients a controller talks to the apiserver
// with: kubeconfig, --master, or in-cluster credentials; QPS and burst; protobuf; user agent.
package kube

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Content types accepted by --kube-api-content-type.
const (
	ContentTypeProtobuf = "application/vnd.kubernetes.protobuf"
	ContentTypeJSON     = "application/json"
)

// Options are the connection flags every binary shares, with upstream's names and defaults.
type Options struct {
	Kubeconfig  string
	Master      string
	QPS         float32
	Burst       int
	ContentType string
	// UserAgent identifies the controller in apiserver logs and audit events.
	UserAgent string
}

// FlagError names the flag a bad value came from, so the CLI can print one clear line.
type FlagError struct {
	Flag string
	Err  error
}

func (e *FlagError) Error() string { return fmt.Sprintf("invalid value for --%s: %v", e.Flag, e.Err) }
func (e *FlagError) Unwrap() error { return e.Err }

// Validate checks the options without contacting the apiserver. A kubeconfig must exist and
// parse; it is loaded again by RESTConfig.
func (o Options) Validate() error {
	if o.QPS < 0 {
		return &FlagError{"kube-api-qps", fmt.Errorf("%v is negative", o.QPS)}
	}
	if o.Burst < 0 {
		return &FlagError{"kube-api-burst", fmt.Errorf("%d is negative", o.Burst)}
	}
	if o.QPS > 0 && o.Burst == 0 {
		return &FlagError{"kube-api-burst", errors.New("must be positive when --kube-api-qps is set")}
	}
	switch o.ContentType {
	case ContentTypeProtobuf, ContentTypeJSON:
	default:
		return &FlagError{"kube-api-content-type", fmt.Errorf("%q is not %s or %s", o.ContentType, ContentTypeProtobuf, ContentTypeJSON)}
	}
	if o.Kubeconfig != "" {
		if _, err := os.Stat(o.Kubeconfig); err != nil {
			return &FlagError{"kubeconfig", fmt.Errorf("%s: %w", o.Kubeconfig, errors.Unwrap(err))}
		}
		if _, err := clientcmd.LoadFromFile(o.Kubeconfig); err != nil {
			return &FlagError{"kubeconfig", fmt.Errorf("%s does not parse: %v", o.Kubeconfig, err)}
		}
	}
	return nil
}

// RESTConfig builds the client configuration: --kubeconfig and --master when given, otherwise
// in-cluster credentials.
func RESTConfig(o Options) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if o.Kubeconfig == "" && o.Master == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig or --master given and not running in a cluster: %w", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags(o.Master, o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig: %w", err)
		}
	}
	Tune(cfg, o)
	return cfg, nil
}

// Tune applies QPS, burst, content type and user agent to cfg.
func Tune(cfg *rest.Config, o Options) {
	cfg.QPS = o.QPS
	cfg.Burst = o.Burst
	if o.ContentType != "" {
		cfg.ContentType = o.ContentType
		if o.ContentType == ContentTypeProtobuf {
			cfg.AcceptContentTypes = ContentTypeProtobuf + "," + ContentTypeJSON
		}
	}
	if o.UserAgent != "" {
		cfg.UserAgent = o.UserAgent
	}
	if cfg.WarningHandlerWithContext == nil && cfg.WarningHandler == nil {
		cfg.WarningHandlerWithContext = &dedupWarnings{}
	}
}

// UserAgent returns "<id>/<version> (<os>/<arch>) kcm-split/<identity>", the user agent of a
// controller: the identity (the process's leader election identity) tells replicas apart in
// apiserver logs and audit events. An empty identity leaves "kcm-split" alone.
func UserAgent(id, version, identity string) string {
	ua := fmt.Sprintf("%s/%s (%s/%s) kcm-split", id, version, runtime.GOOS, runtime.GOARCH)
	if identity != "" {
		ua += "/" + identity
	}
	return ua
}
