package app

import (
	"cmp"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/component-base/featuregate"

	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/kube"
	"github.com/kcm-split/kcm-split/shared/leader"
	"github.com/kcm-split/kcm-split/shared/logging"
	"github.com/kcm-split/kcm-split/shared/serving"
)

// Common flag names, upstream's.
const (
	FlagKubeconfig          = "kubeconfig"
	FlagMaster              = "master"
	FlagQPS                 = "kube-api-qps"
	FlagBurst               = "kube-api-burst"
	FlagContentType         = "kube-api-content-type"
	FlagLeaderElect         = "leader-elect"
	FlagLeaseDuration       = "leader-elect-lease-duration"
	FlagRenewDeadline       = "leader-elect-renew-deadline"
	FlagRetryPeriod         = "leader-elect-retry-period"
	FlagLeaseNamespace      = "leader-elect-resource-namespace"
	FlagLeaseName           = "leader-elect-resource-name"
	FlagEnableMigration     = "enable-leader-migration"
	FlagMigrationConfig     = "leader-migration-config"
	FlagMigrationNamespace  = "leader-migration-resource-namespace"
	FlagTakeOver            = "take-over-from-kcm"
	FlagKCMNamespace        = "kcm-namespace"
	FlagKCMPodSelector      = "kcm-pod-selector"
	FlagKCMLeaseName        = "kcm-lease-name"
	FlagMetricsBindAddress  = "metrics-bind-address"
	FlagHealthBindAddress   = "health-probe-bind-address"
	FlagV                   = "v"
	FlagVModule             = "vmodule"
	FlagLoggingFormat       = "logging-format"
	FlagLogLevel            = "log-level"  // kcm-split's older name of --v; --v wins
	FlagLogFormat           = "log-format" // kcm-split's older name of --logging-format; --logging-format wins
	FlagShutdownGracePeriod = "shutdown-grace-period"
	FlagMinResyncPeriod     = "min-resync-period"
	FlagFeatureGates        = "feature-gates"
	FlagShards              = "shards"
	FlagShardIndex          = "shard-index"
	FlagShardHash           = "shard-hash"
	FlagAuthnCacheTTL       = "authentication-token-webhook-cache-ttl"
	FlagAuthzAllowedTTL     = "authorization-webhook-cache-authorized-ttl"
	FlagAuthzDeniedTTL      = "authorization-webhook-cache-unauthorized-ttl"
)

// EnvPrefix prefixes the environment variable of every flag: --kube-api-qps is also read from
// KCM_SPLIT_KUBE_API_QPS.
const EnvPrefix = "KCM_SPLIT_"

// EnvVar returns the environment variable that sets flag name.
func EnvVar(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// options are the common settings, grouped by job; each group's flags are bound to its fields.
type options struct {
	client clientOptions
	// leader is --leader-elect and the --leader-elect-* flags, and --shutdown-grace-period as
	// its ShutdownGrace.
	leader    leader.Config
	logging   loggingOptions
	serving   servingOptions
	features  featureOptions
	migration migrationOptions // migration.go
	takeOver  takeOverOptions  // takeover.go
	sharding  shardingOptions  // sharding.go
}

// clientOptions are the REST client's settings and the informers' resync.
type clientOptions struct {
	kube      kube.Options
	qps       float64 // kube.QPS, as the flag's type
	minResync time.Duration
}

// loggingOptions are upstream's logging flags and kcm-split's older names of them.
type loggingOptions struct {
	log    logging.Options
	v      int
	format string // --logging-format
	// ignored lists the older logging flags given together with the upstream flag that
	// overrides them, to be logged once the logger exists.
	ignored [][2]string
}

// servingOptions are the secure port's settings and the plain-HTTP addresses.
type servingOptions struct {
	metrics string // --metrics-bind-address
	health  string // --health-probe-bind-address
	secure  serving.Options
	allowed cli.StringSlice // secure.AlwaysAllowPaths, as the flag's type
	ttls    serving.CacheTTLs
}

// featureOptions are --feature-gates.
type featureOptions struct {
	flags cli.StringSlice // as given
	gates featuregate.MutableVersionedFeatureGate
}

// flags returns the common flags, each bound to its field of o, in --help's order.
func (o *options) flags(spec Spec) []cli.Flag {
	return slices.Concat([]cli.Flag{
		&cli.StringFlag{Name: FlagKubeconfig, Category: "Client", Destination: &o.client.kube.Kubeconfig, Usage: "path to a kubeconfig; empty means in-cluster credentials"},
		&cli.StringFlag{Name: FlagMaster, Category: "Client", Destination: &o.client.kube.Master, Usage: "address of the Kubernetes API server (overrides the kubeconfig's)"},
		&cli.Float64Flag{Name: FlagQPS, Category: "Client", Value: float64(cmp.Or(spec.DefaultQPS, 20)), Destination: &o.client.qps, Usage: "QPS to use while talking with the API server"},
		&cli.IntFlag{Name: FlagBurst, Category: "Client", Value: cmp.Or(spec.DefaultBurst, 30), Destination: &o.client.kube.Burst, Usage: "burst to use while talking with the API server"},
		&cli.StringFlag{Name: FlagContentType, Category: "Client", Value: kube.ContentTypeProtobuf, Destination: &o.client.kube.ContentType, Usage: "content type of requests sent to the API server"},

		&cli.BoolFlag{Name: FlagLeaderElect, Category: "Leader election", Value: true, Destination: &o.leader.Enabled, Usage: "hold a Lease while running, so that only one replica acts at a time"},
		&cli.DurationFlag{
			Name:        FlagLeaseDuration,
			Category:    "Leader election",
			Value:       15 * time.Second,
			Destination: &o.leader.LeaseDuration,
			Usage:       "how long a standby waits after the last renewal before taking over",
		},
		&cli.DurationFlag{
			Name:        FlagRenewDeadline,
			Category:    "Leader election",
			Value:       10 * time.Second,
			Destination: &o.leader.RenewDeadline,
			Usage:       "how long the leader keeps retrying a renewal before giving up; less than the lease duration",
		},
		&cli.DurationFlag{Name: FlagRetryPeriod, Category: "Leader election", Value: 2 * time.Second, Destination: &o.leader.RetryPeriod, Usage: "how often candidates try to acquire or renew the Lease"},
		&cli.DurationFlag{
			Name:        FlagMinResyncPeriod,
			Category:    "Client",
			Value:       12 * time.Hour,
			Destination: &o.client.minResync,
			Usage:       "informers resync at a random period between this and twice this, so dropped keys and hand edits are eventually reconciled",
		},

		&cli.StringFlag{Name: FlagLeaseNamespace, Category: "Leader election", Value: "kube-system", Destination: &o.leader.Namespace, Usage: "namespace of the Lease"},
		&cli.StringFlag{Name: FlagLeaseName, Category: "Leader election", Value: spec.ID, Destination: &o.leader.Name, Usage: "name of the Lease"},
	},
		o.migration.flags(),
		o.takeOver.flags(),
		o.serving.flags(spec),
		[]cli.Flag{
			&cli.DurationFlag{
				Name:        FlagShutdownGracePeriod,
				Category:    "Serving",
				Value:       20 * time.Second,
				Destination: &o.leader.ShutdownGrace,
				Usage:       "how long to let workers finish after SIGTERM before releasing the Lease and exiting",
			},

			&cli.StringSliceFlag{Name: FlagFeatureGates, Category: "Feature gates", Destination: &o.features.flags, Usage: featureGatesUsage(spec)},
		},
		o.logging.flags(),
		o.sharding.flags(spec),
	)
}

// Over 80 lines: one literal list of the serving flags, a field a line.
func (o *servingOptions) flags(spec Spec) []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{
			Name:        serving.FlagSecurePort,
			Category:    "Secure serving",
			Value:       spec.DefaultPort,
			Destination: &o.secure.Port,
			Usage:       "HTTPS port serving /metrics, /healthz, /readyz, /livez (and /debug/pprof with --" + serving.FlagProfiling + "), with authentication and authorization; 0 disables",
		},
		&cli.StringFlag{
			Name:        serving.FlagBindAddress,
			Category:    "Secure serving",
			Value:       "0.0.0.0",
			Destination: &o.secure.BindAddress,
			Usage:       "IP address the secure port listens on (0.0.0.0 or :: for all interfaces)",
		},
		&cli.StringFlag{
			Name:        serving.FlagTLSCertFile,
			Category:    "Secure serving",
			Destination: &o.secure.CertFile,
			Usage:       "PEM certificate (with intermediates) for the secure port; empty means a self-signed certificate generated at start",
		},
		&cli.StringFlag{Name: serving.FlagTLSPrivateKeyFile, Category: "Secure serving", Destination: &o.secure.KeyFile, Usage: "PEM private key matching --" + serving.FlagTLSCertFile},
		&cli.StringFlag{
			Name:        serving.FlagTLSMinVersion,
			Category:    "Secure serving",
			Value:       serving.DefaultTLSMinVersion,
			Destination: &o.secure.MinTLSVersion,
			Usage:       "minimum TLS version: VersionTLS12 or VersionTLS13",
		},
		&cli.StringFlag{
			Name:        serving.FlagAuthenticationKubconfig,
			Category:    "Secure serving",
			Destination: &o.secure.AuthenticationKubeconfig,
			Usage:       "kubeconfig of the apiserver that answers TokenReviews; empty means this controller's own credentials",
		},
		&cli.StringFlag{
			Name:        serving.FlagAuthorizationKubconfig,
			Category:    "Secure serving",
			Destination: &o.secure.AuthorizationKubeconfig,
			Usage:       "kubeconfig of the apiserver that answers SubjectAccessReviews; empty means this controller's own credentials",
		},
		&cli.StringSliceFlag{
			Name:        serving.FlagAlwaysAllowPaths,
			Category:    "Secure serving",
			Value:       cli.NewStringSlice(serving.DefaultAlwaysAllowPaths...),
			Destination: &o.allowed,
			Usage:       "paths served without authentication or authorization; a trailing * matches a prefix",
		},
		&cli.DurationFlag{
			Name:        FlagAuthnCacheTTL,
			Category:    "Secure serving",
			Value:       serving.DefaultCacheTTLs.Authenticated,
			Destination: &o.ttls.Authenticated,
			Usage:       "how long an accepted token is trusted before the next TokenReview (upstream's default is 10s; longer than a scrape interval here so scrapes cost no review)",
		},
		&cli.DurationFlag{
			Name:        FlagAuthzAllowedTTL,
			Category:    "Secure serving",
			Value:       serving.DefaultCacheTTLs.Authorized,
			Destination: &o.ttls.Authorized,
			Usage:       "how long an allowing SubjectAccessReview is reused (upstream's default is 10s)",
		},
		&cli.DurationFlag{
			Name:        FlagAuthzDeniedTTL,
			Category:    "Secure serving",
			Value:       serving.DefaultCacheTTLs.Unauthorized,
			Destination: &o.ttls.Unauthorized,
			Usage:       "how long a denying SubjectAccessReview is reused (upstream's default is 10s)",
		},
		&cli.BoolFlag{Name: serving.FlagProfiling, Category: "Secure serving", Destination: &o.secure.Profiling, Usage: "serve /debug/pprof on the secure port, to authorized users only"},
		&cli.StringFlag{
			Name:        FlagMetricsBindAddress,
			Category:    "Plain HTTP serving",
			Destination: &o.metrics,
			Usage: "address serving /metrics (and the health endpoints unless --" + FlagHealthBindAddress +
				" differs) over plain HTTP WITHOUT authentication, e.g. 127.0.0.1:8080; empty or port 0 disables",
		},
		&cli.StringFlag{
			Name:        FlagHealthBindAddress,
			Category:    "Plain HTTP serving",
			Destination: &o.health,
			Usage:       "address serving /healthz, /readyz and /livez over plain HTTP; empty means the metrics address; port 0 disables",
		},
	}
}

func (o *loggingOptions) flags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: FlagV, Category: "Logging", Destination: &o.v, Usage: "log verbosity 0-10: 2 logs retries, 4 every sync, 6 and up client-go's requests (-v=4 and --v=4 alike)"},
		&cli.StringFlag{
			Name:        FlagVModule,
			Category:    "Logging",
			Destination: &o.log.VModule,
			Usage:       "comma-separated list of pattern=N giving source files their own verbosity; the pattern matches a file name without .go (or a path, with a /), * and ? as wildcards",
		},
		&cli.StringFlag{Name: FlagLoggingFormat, Category: "Logging", Value: "json", Destination: &o.format, Usage: "json or text"},
		&cli.StringFlag{
			Name:        FlagLogLevel,
			Category:    "Logging",
			Value:       "info",
			Destination: &o.log.Level,
			Usage:       "older name of --v, which wins when both are given: a verbosity 0-10, or debug (1), info (0), warn, error",
		},
		&cli.StringFlag{
			Name:        FlagLogFormat,
			Category:    "Logging",
			Value:       "json",
			Destination: &o.log.Format,
			Usage:       "older name of --logging-format, which wins when both are given: json, or console (the same as text)",
		},
	}
}

// complete settles what the flags filled and validates it all, the controller's Options last.
// c tells which flags were given (command line or environment); no value is read from it.
// The checks run in this order, each job's own order inside, so that of several bad values
// the same one is reported every time.
func (o *options) complete(spec Spec, c *cli.Context) error {
	o.client.kube.QPS = float32(o.client.qps)
	if err := o.logging.complete(c); err != nil {
		return err
	}
	if err := o.client.kube.Validate(); err != nil {
		return err
	}
	if err := o.leader.Validate(); err != nil {
		return err
	}
	if err := o.serving.complete(); err != nil {
		return err
	}
	if o.client.minResync <= 0 {
		return &FlagError{Flag: FlagMinResyncPeriod, Err: fmt.Errorf("%s must be positive", o.client.minResync)}
	}
	if o.leader.ShutdownGrace < 0 {
		return &FlagError{Flag: FlagShutdownGracePeriod, Err: fmt.Errorf("%s is negative", o.leader.ShutdownGrace)}
	}
	if err := o.migration.complete(o.leader); err != nil {
		return err
	}
	if err := o.takeOver.complete(o.leader, o.migration); err != nil {
		return err
	}
	if err := o.sharding.complete(spec, c, &o.leader); err != nil {
		return err
	}
	gates, err := features.Parse(o.features.flags.Value())
	if err != nil {
		return &FlagError{Flag: FlagFeatureGates, Err: err}
	}
	o.features.gates = gates
	if spec.Options != nil {
		return spec.Options.Validate()
	}
	return nil
}

// complete validates the addresses, the secure port's settings and the review caches' TTLs.
func (o *servingOptions) complete() error {
	o.secure.AlwaysAllowPaths = o.allowed.Value()
	o.ttls.Unauthenticated = serving.DefaultCacheTTLs.Unauthenticated
	for flag, addr := range map[string]string{FlagMetricsBindAddress: o.metrics, FlagHealthBindAddress: o.health} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return &FlagError{Flag: flag, Err: err}
		}
	}
	if err := o.secure.Validate(); err != nil {
		return err
	}
	for flag, d := range map[string]time.Duration{FlagAuthnCacheTTL: o.ttls.Authenticated, FlagAuthzAllowedTTL: o.ttls.Authorized, FlagAuthzDeniedTTL: o.ttls.Unauthorized} {
		if d < 0 {
			return &FlagError{Flag: flag, Err: fmt.Errorf("%s is negative (0 turns the cache off)", d)}
		}
	}
	return nil
}

// complete settles the logging options. Upstream's flags win over kcm-split's older names:
// --v over --log-level, --logging-format over --log-format, wherever each was given (command
// line or environment), so a --v added to a manifest that already passes --log-level takes
// effect.
func (o *loggingOptions) complete(c *cli.Context) error {
	levelFlag := FlagLogLevel
	if c.IsSet(FlagV) {
		v := o.v
		if v < 0 || v > logging.MaxVerbosity {
			return &FlagError{Flag: FlagV, Err: fmt.Errorf("%d is not a verbosity 0-%d", v, logging.MaxVerbosity)}
		}
		if c.IsSet(FlagLogLevel) {
			o.ignored = append(o.ignored, [2]string{FlagLogLevel, FlagV})
		}
		o.log.Level, levelFlag = strconv.Itoa(v), FlagV
	}
	if _, err := logging.ParseLevel(o.log.Level); err != nil {
		return &FlagError{Flag: levelFlag, Err: err}
	}
	if _, err := logging.ParseVModule(o.log.VModule); err != nil {
		return &FlagError{Flag: FlagVModule, Err: err}
	}
	formatFlag := FlagLogFormat
	if c.IsSet(FlagLoggingFormat) || !c.IsSet(FlagLogFormat) {
		if c.IsSet(FlagLoggingFormat) && c.IsSet(FlagLogFormat) {
			o.ignored = append(o.ignored, [2]string{FlagLogFormat, FlagLoggingFormat})
		}
		o.log.Format, formatFlag = o.format, FlagLoggingFormat
	}
	if err := logging.ValidateFormat(o.log.Format); err != nil {
		return &FlagError{Flag: formatFlag, Err: err}
	}
	return nil
}

// featureGatesUsage says which gates act on this binary, with their defaults.
func featureGatesUsage(spec Spec) string {
	gates := features.New()
	var acts []string
	for _, g := range spec.FeatureGates {
		acts = append(acts, fmt.Sprintf("%s=%t", g, gates.Enabled(g)))
	}
	on := "none"
	if len(acts) > 0 {
		on = strings.Join(acts, ", ")
	}
	return "comma-separated Gate=true|false pairs, kube-controller-manager " + features.Version.String() +
		"'s gates with its defaults and locks; an unknown gate is refused. Acting on this controller (defaults): " + on +
		"; the others are accepted and have no effect here"
}

// withEnv gives every flag its KCM_SPLIT_ environment variable. Each of urfave/cli's flag
// types has its own EnvVars field and no method sets it, so the field is set by reflection,
// once for all types.
func withEnv(flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		var field reflect.Value
		if v := reflect.ValueOf(f); v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
			field = v.Elem().FieldByName("EnvVars")
		}
		if !field.IsValid() || field.Type() != reflect.TypeFor[[]string]() {
			panic(fmt.Sprintf("app: flag --%s (%T) has no EnvVars field", f.Names()[0], f))
		}
		field.Set(reflect.ValueOf([]string{EnvVar(f.Names()[0])}))
	}
	return flags
}
