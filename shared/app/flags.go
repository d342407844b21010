package app

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/kube"
	"github.com/kcm-split/kcm-split/shared/migration"
	"github.com/kcm-split/kcm-split/shared/serving"
	"github.com/kcm-split/kcm-split/shared/sharding"
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

// flags returns the common flags, each bound to its field of o.
func (o *options) flags(spec Spec) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagKubeconfig, Category: "Client", Destination: &o.kube.Kubeconfig, Usage: "path to a kubeconfig; empty means in-cluster credentials"},
		&cli.StringFlag{Name: FlagMaster, Category: "Client", Destination: &o.kube.Master, Usage: "address of the Kubernetes API server (overrides the kubeconfig's)"},
		&cli.Float64Flag{Name: FlagQPS, Category: "Client", Value: float64(cmp.Or(spec.DefaultQPS, 20)), Destination: &o.qps, Usage: "QPS to use while talking with the API server"},
		&cli.IntFlag{Name: FlagBurst, Category: "Client", Value: cmp.Or(spec.DefaultBurst, 30), Destination: &o.kube.Burst, Usage: "burst to use while talking with the API server"},
		&cli.StringFlag{Name: FlagContentType, Category: "Client", Value: kube.ContentTypeProtobuf, Destination: &o.kube.ContentType, Usage: "content type of requests sent to the API server"},

		&cli.BoolFlag{Name: FlagLeaderElect, Category: "Leader election", Value: true, Destination: &o.leader.Enabled, Usage: "hold a Lease while running, so that only one replica acts at a time"},
		&cli.DurationFlag{Name: FlagLeaseDuration, Category: "Leader election", Value: 15 * time.Second, Destination: &o.leader.LeaseDuration, Usage: "how long a standby waits after the last renewal before taking over"},
		&cli.DurationFlag{Name: FlagRenewDeadline, Category: "Leader election", Value: 10 * time.Second, Destination: &o.leader.RenewDeadline, Usage: "how long the leader keeps retrying a renewal before giving up; less than the lease duration"},
		&cli.DurationFlag{Name: FlagRetryPeriod, Category: "Leader election", Value: 2 * time.Second, Destination: &o.leader.RetryPeriod, Usage: "how often candidates try to acquire or renew the Lease"},
		&cli.DurationFlag{Name: FlagMinResyncPeriod, Category: "Client", Value: 12 * time.Hour, Destination: &o.minResync, Usage: "informers resync at a random period between this and twice this, so dropped keys and hand edits are eventually reconciled"},

		&cli.StringFlag{Name: FlagLeaseNamespace, Category: "Leader election", Value: "kube-system", Destination: &o.leader.Namespace, Usage: "namespace of the Lease"},
		&cli.StringFlag{Name: FlagLeaseName, Category: "Leader election", Value: spec.ID, Destination: &o.leader.Name, Usage: "name of the Lease"},
		&cli.BoolFlag{Name: FlagEnableMigration, Category: "Leader election", Destination: &o.migrationEnabled, Usage: "take part in Leader Migration with kube-controller-manager: controllers the --" + FlagMigrationConfig + " file gives to kcm-split (or *) run only while kcm-split's binaries hold its migration Lease together, those it gives to another component never run here; needs --" + FlagLeaderElect},
		&cli.StringFlag{Name: FlagMigrationConfig, Category: "Leader election", Destination: &o.migrationPath, Usage: "path of the LeaderMigrationConfiguration file (controllermanager.config.k8s.io, resourceLock leases) read with --" + FlagEnableMigration + "; empty means every controller of this binary goes to kcm-split under the Lease " + migration.DefaultLeaderName},
		&cli.StringFlag{Name: FlagMigrationNamespace, Category: "Leader election", Destination: &o.migrationNamespace, Usage: "namespace of the migration Lease: kube-controller-manager's --" + FlagLeaseNamespace + "; empty means this binary's --" + FlagLeaseNamespace + " (upstream's choice: one namespace for both Leases)"},

		&cli.BoolFlag{Name: FlagTakeOver, Category: "Leader election", Destination: &o.takeOver, Usage: "stand by (Ready) until kube-controller-manager provably runs none of this binary's controllers: every Pod matching --" + FlagKCMPodSelector + " turns them off in its --controllers, and its Lease is free, expired, or taken by a process started in one of those Pods; stop them, writes refused at once, when that no longer holds. Needs --" + FlagLeaderElect + "; not with --" + FlagEnableMigration},
		&cli.StringFlag{Name: FlagKCMNamespace, Category: "Leader election", Value: "kube-system", Destination: &o.takeOverOpts.Namespace, Usage: "namespace of kube-controller-manager's Pods and Lease, for --" + FlagTakeOver},
		&cli.StringFlag{Name: FlagKCMPodSelector, Category: "Leader election", Value: "component=kube-controller-manager", Destination: &o.takeOverOpts.PodSelector, Usage: "label selector of kube-controller-manager's Pods (kubeadm's static Pods' label), for --" + FlagTakeOver},
		&cli.StringFlag{Name: FlagKCMLeaseName, Category: "Leader election", Value: "kube-controller-manager", Destination: &o.takeOverOpts.LeaseName, Usage: "name of kube-controller-manager's Lease (its --leader-elect-resource-name), for --" + FlagTakeOver},

		&cli.IntFlag{Name: serving.FlagSecurePort, Category: "Secure serving", Value: spec.DefaultPort, Destination: &o.secure.Port, Usage: "HTTPS port serving /metrics, /healthz, /readyz, /livez (and /debug/pprof with --" + serving.FlagProfiling + "), with authentication and authorization; 0 disables"},
		&cli.StringFlag{Name: serving.FlagBindAddress, Category: "Secure serving", Value: "0.0.0.0", Destination: &o.secure.BindAddress, Usage: "IP address the secure port listens on (0.0.0.0 or :: for all interfaces)"},
		&cli.StringFlag{Name: serving.FlagTLSCertFile, Category: "Secure serving", Destination: &o.secure.CertFile, Usage: "PEM certificate (with intermediates) for the secure port; empty means a self-signed certificate generated at start"},
		&cli.StringFlag{Name: serving.FlagTLSPrivateKeyFile, Category: "Secure serving", Destination: &o.secure.KeyFile, Usage: "PEM private key matching --" + serving.FlagTLSCertFile},
		&cli.StringFlag{Name: serving.FlagTLSMinVersion, Category: "Secure serving", Value: serving.DefaultTLSMinVersion, Destination: &o.secure.MinTLSVersion, Usage: "minimum TLS version: VersionTLS12 or VersionTLS13"},
		&cli.StringFlag{Name: serving.FlagAuthenticationKubconfig, Category: "Secure serving", Destination: &o.secure.AuthenticationKubeconfig, Usage: "kubeconfig of the apiserver that answers TokenReviews; empty means this controller's own credentials"},
		&cli.StringFlag{Name: serving.FlagAuthorizationKubconfig, Category: "Secure serving", Destination: &o.secure.AuthorizationKubeconfig, Usage: "kubeconfig of the apiserver that answers SubjectAccessReviews; empty means this controller's own credentials"},
		&cli.StringSliceFlag{Name: serving.FlagAlwaysAllowPaths, Category: "Secure serving", Value: cli.NewStringSlice(serving.DefaultAlwaysAllowPaths...), Destination: &o.allowed, Usage: "paths served without authentication or authorization; a trailing * matches a prefix"},
		&cli.DurationFlag{Name: FlagAuthnCacheTTL, Category: "Secure serving", Value: serving.DefaultCacheTTLs.Authenticated, Destination: &o.ttls.Authenticated, Usage: "how long an accepted token is trusted before the next TokenReview (upstream's default is 10s; longer than a scrape interval here so scrapes cost no review)"},
		&cli.DurationFlag{Name: FlagAuthzAllowedTTL, Category: "Secure serving", Value: serving.DefaultCacheTTLs.Authorized, Destination: &o.ttls.Authorized, Usage: "how long an allowing SubjectAccessReview is reused (upstream's default is 10s)"},
		&cli.DurationFlag{Name: FlagAuthzDeniedTTL, Category: "Secure serving", Value: serving.DefaultCacheTTLs.Unauthorized, Destination: &o.ttls.Unauthorized, Usage: "how long a denying SubjectAccessReview is reused (upstream's default is 10s)"},
		&cli.BoolFlag{Name: serving.FlagProfiling, Category: "Secure serving", Destination: &o.secure.Profiling, Usage: "serve /debug/pprof on the secure port, to authorized users only"},
		&cli.StringFlag{Name: FlagMetricsBindAddress, Category: "Plain HTTP serving", Destination: &o.metrics, Usage: "address serving /metrics (and the health endpoints unless --" + FlagHealthBindAddress + " differs) over plain HTTP WITHOUT authentication, e.g. 127.0.0.1:8080; empty or port 0 disables"},
		&cli.StringFlag{Name: FlagHealthBindAddress, Category: "Plain HTTP serving", Destination: &o.health, Usage: "address serving /healthz, /readyz and /livez over plain HTTP; empty means the metrics address; port 0 disables"},
		&cli.DurationFlag{Name: FlagShutdownGracePeriod, Category: "Serving", Value: 20 * time.Second, Destination: &o.shutdown, Usage: "how long to let workers finish after SIGTERM before releasing the Lease and exiting"},

		&cli.StringSliceFlag{Name: FlagFeatureGates, Category: "Feature gates", Destination: &o.gateFlags, Usage: featureGatesUsage(spec)},

		&cli.IntFlag{Name: FlagV, Category: "Logging", Destination: &o.v, Usage: "log verbosity 0-10: 2 logs retries, 4 every sync, 6 and up client-go's requests (-v=4 and --v=4 alike)"},
		&cli.StringFlag{Name: FlagVModule, Category: "Logging", Destination: &o.log.VModule, Usage: "comma-separated list of pattern=N giving source files their own verbosity; the pattern matches a file name without .go (or a path, with a /), * and ? as wildcards"},
		&cli.StringFlag{Name: FlagLoggingFormat, Category: "Logging", Value: "json", Destination: &o.format, Usage: "json or text"},
		&cli.StringFlag{Name: FlagLogLevel, Category: "Logging", Value: "info", Destination: &o.log.Level, Usage: "older name of --v, which wins when both are given: a verbosity 0-10, or debug (1), info (0), warn, error"},
		&cli.StringFlag{Name: FlagLogFormat, Category: "Logging", Value: "json", Destination: &o.log.Format, Usage: "older name of --logging-format, which wins when both are given: json, or console (the same as text)"},
	}
}

// shardingFlags are --shards and --shard-index, for a Spec with Sharded.
func (o *options) shardingFlags(spec Spec) []cli.Flag {
	if !spec.Sharded {
		return nil
	}
	o.shard = sharding.Whole
	return []cli.Flag{
		&cli.IntFlag{Name: FlagShards, Category: "Sharding", Value: 1, Destination: &o.shard.Count, Usage: "number of static shards the namespaces are split into (by a hash of the namespace name, KEP-5866 ranges); each shard elects on its own Lease <lease name>-shard-<index>-of-<shards> and caches only its namespaces' objects (cluster-scoped ones whole). 1 is one replica for everything, upstream's behaviour. Given (even as 1), the process waits until no Lease of another --shards of this binary is held before it campaigns or writes"},
		&cli.IntFlag{Name: FlagShardIndex, Category: "Sharding", Value: 0, Destination: &o.shard.Index, Usage: "this process's shard, 0 to --shards minus 1"},
	}
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

// withEnv gives every flag its KCM_SPLIT_ environment variable.
func withEnv(flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		env := []string{EnvVar(f.Names()[0])}
		switch f := f.(type) {
		case *cli.StringFlag:
			f.EnvVars = env
		case *cli.BoolFlag:
			f.EnvVars = env
		case *cli.IntFlag:
			f.EnvVars = env
		case *cli.Int64Flag:
			f.EnvVars = env
		case *cli.UintFlag:
			f.EnvVars = env
		case *cli.Float64Flag:
			f.EnvVars = env
		case *cli.DurationFlag:
			f.EnvVars = env
		case *cli.StringSliceFlag:
			f.EnvVars = env
		default:
			panic(fmt.Sprintf("app: flag --%s has a type (%T) withEnv does not know", f.Names()[0], f))
		}
	}
	return flags
}
