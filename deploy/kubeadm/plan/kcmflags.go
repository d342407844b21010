package plan

// kind is how kube-controller-manager parses a flag's value.
type kind uint8

const (
	kString   kind = iota
	kBool          // --name alone means true
	kInt           // a 32-bit integer
	kFloat         // a 32-bit float
	kDuration      // a Go duration
	kList          // a comma-separated list; a repeated flag adds to it
	kGates         // --feature-gates: [component:]Gate=bool pairs; a repeated flag adds to it
)

// how is what the plan does with a flag.
type how uint8

const (
	// toFlag: controllers.<alias>.flags.<To> of each chosen binary in For, typed by Kind.
	toFlag how = iota
	// toExtraArg: "--<To>=<value>" in controllers.<alias>.extraArgs of each chosen binary in For
	// (every chosen binary when For is empty): a flag the binaries have and the chart has no
	// key for.
	toExtraArg
	// toQPS, toBurst: controllers.<alias>.kubeAPIQPS / kubeAPIBurst, scaled (binary.QPSFactor).
	toQPS
	toBurst
	// toLogLevel: controllers.<alias>.logLevel (the binaries' --log-level takes a verbosity).
	toLogLevel
	// toLogFormat: defaults.logFormat (json, or console for text).
	toLogFormat
	// toLeaderElection: defaults.leaderElection.<To>, the binaries' own Leases' timing.
	toLeaderElection
	// toKCMLease: takeOverFromKCM.<To>, where the take-over finds kube-controller-manager's Lease.
	toKCMLease
	// toGates: the kube component's gates, in each chosen binary's extraArgs.
	toGates
	// toControllers: read to compute the new --controllers and each binary's own.
	toControllers
	// implicit: the binaries already do what the value says (Why); other values are not
	// carried (Else).
	implicit
	// byChart: not carried: the chart sets the binaries' own (Why).
	byChart
	// notOurs: not carried: only Owner uses it, which stays in kube-controller-manager.
	notOurs
	// noEquivalent: not carried: the binaries have no such setting (Why).
	noEquivalent
)

// kcmFlag is one flag of kube-controller-manager v1.36 and what the plan does with it.
type kcmFlag struct {
	Name string
	Kind kind
	How  how
	// To is the binary flag (toFlag, toExtraArg) or the values key (toLeaderElection, toKCMLease).
	To string
	// For are the chart keys of the binaries the flag matters to; empty: every binary. A flag
	// whose binaries are all left out is not carried, for that reason.
	For []string
	// Accept, when set, are the only values carried (or, for implicit, already in force); for
	// any other the flag is not carried, for Else.
	Accept []string
	Why    string
	Else   string
	// Owner names what uses a notOurs flag.
	Owner string
	// Note is told the operator when the flag is carried with the value NoteWhen (any value
	// when empty).
	Note, NoteWhen string
}

// Reasons shared by several flags.
const (
	whyServing   = "kube-controller-manager's own HTTPS endpoint on its host; each binary serves on its own port (controllers.<alias>.port), with the chart's serving settings (serving.tlsSecretName)"
	whyHostCreds = "kube-controller-manager's credentials on its host; each binary runs as its own ServiceAccount (the chart's RBAC) against the in-cluster apiserver"
	whyCloud     = "the in-tree cloud provider integration, of which kube-controller-manager v1.36 has nothing left; a cloud-controller-manager does that work"
	whyLogs      = "a logging setting the binaries do not have"
	whyMetrics   = "kube-controller-manager's metrics filters; the binaries have no such filter"

	noteRecycler = "a recycler Pod template is a file on kube-controller-manager's host: mount it into pv-binder-controller's Pod " +
		"at the same path (controllers.pvbinder.extraVolumes and extraVolumeMounts, see values.yaml), or the binary refuses to start"
)

// kcmFlags is every flag of kube-controller-manager v1.36 (as its --help lists them; a test
// compares), with what the plan does with it.
var kcmFlags = []kcmFlag{
	// Generic.
	{Name: "controllers", Kind: kList, How: toControllers},
	{Name: "feature-gates", Kind: kGates, How: toGates},
	{Name: "kube-api-qps", Kind: kFloat, How: toQPS},
	{Name: "kube-api-burst", Kind: kInt, How: toBurst},
	{Name: "kube-api-content-type", Kind: kString, How: toExtraArg, To: "kube-api-content-type"},
	{Name: "min-resync-period", Kind: kDuration, How: toExtraArg, To: "min-resync-period"},
	{Name: "leader-elect", Kind: kBool, How: implicit, Accept: []string{"true"},
		Why:  "each binary elects a leader on its own Lease",
		Else: "kube-controller-manager without leader election (one replica); the binaries always elect, so that their replicas never act together"},
	{Name: "leader-elect-lease-duration", Kind: kDuration, How: toLeaderElection, To: "leaseDuration"},
	{Name: "leader-elect-renew-deadline", Kind: kDuration, How: toLeaderElection, To: "renewDeadline"},
	{Name: "leader-elect-retry-period", Kind: kDuration, How: toLeaderElection, To: "retryPeriod"},
	{Name: "leader-elect-resource-lock", Kind: kString, How: implicit, Accept: []string{"leases"},
		Why:  "the binaries elect on Leases",
		Else: "the binaries elect on Leases only"},
	{Name: "leader-elect-resource-name", Kind: kString, How: toKCMLease, To: "leaseName"},
	{Name: "leader-elect-resource-namespace", Kind: kString, How: toKCMLease, To: "namespace"},
	{Name: "use-service-account-credentials", Kind: kBool, How: implicit,
		Why: "each binary runs as a ServiceAccount of its own, with the chart's least-privilege RBAC"},
	{Name: "controller-start-interval", Kind: kDuration, How: noEquivalent, Why: "the binaries start their controllers together, once their Lease is held"},
	{Name: "controller-shutdown-timeout", Kind: kDuration, How: noEquivalent, Why: "the binaries' shutdown is bounded by defaults.shutdownGracePeriod and terminationGracePeriodSeconds"},
	{Name: "emulated-version", Kind: kList, How: noEquivalent, Why: "the binaries implement v1.36's behaviour only"},
	{Name: "min-compatibility-version", Kind: kList, How: noEquivalent, Why: "the binaries implement v1.36's behaviour only"},
	{Name: "enable-leader-migration", Kind: kBool, How: noEquivalent,
		Why: "kube-controller-manager takes part in Leader Migration; this plan is for the take-over, which does not use it: finish or undo that migration first"},
	{Name: "leader-migration-config", Kind: kString, How: noEquivalent,
		Why: "kube-controller-manager takes part in Leader Migration; this plan is for the take-over, which does not use it: finish or undo that migration first"},
	{Name: "kubeconfig", Kind: kString, How: byChart, Why: whyHostCreds},
	{Name: "master", Kind: kString, How: byChart, Why: whyHostCreds},
	{Name: "help", Kind: kBool, How: noEquivalent, Why: "prints help"},
	{Name: "version", Kind: kBool, How: noEquivalent, Why: "prints the version"},

	// Debugging and logs.
	{Name: "profiling", Kind: kBool, How: toExtraArg, To: "profiling"},
	{Name: "contention-profiling", Kind: kBool, How: noEquivalent, Why: "the binaries' --profiling serves pprof without block profiling"},
	{Name: "v", Kind: kInt, How: toLogLevel},
	{Name: "vmodule", Kind: kString, How: toExtraArg, To: "vmodule"},
	{Name: "logging-format", Kind: kString, How: toLogFormat, Accept: []string{"text", "json"},
		Else: "the binaries log json or text"},
	{Name: "log-flush-frequency", Kind: kDuration, How: noEquivalent, Why: whyLogs},
	{Name: "log-json-info-buffer-size", Kind: kString, How: noEquivalent, Why: whyLogs},
	{Name: "log-json-split-stream", Kind: kBool, How: noEquivalent, Why: whyLogs},
	{Name: "log-text-info-buffer-size", Kind: kString, How: noEquivalent, Why: whyLogs},
	{Name: "log-text-split-stream", Kind: kBool, How: noEquivalent, Why: whyLogs},
	{Name: "allow-metric-labels", Kind: kString, How: noEquivalent, Why: whyMetrics},
	{Name: "allow-metric-labels-manifest", Kind: kString, How: noEquivalent, Why: whyMetrics},
	{Name: "disabled-metrics", Kind: kList, How: noEquivalent, Why: whyMetrics},
	{Name: "show-hidden-metrics-for-version", Kind: kString, How: noEquivalent, Why: whyMetrics},

	// Serving. The caches' lifetimes, the paths served openly and the TLS floor mean the same
	// on the binaries' endpoints; the rest belongs to kube-controller-manager's host.
	{Name: "bind-address", Kind: kString, How: byChart, Why: whyServing},
	{Name: "secure-port", Kind: kInt, How: byChart, Why: whyServing},
	{Name: "cert-dir", Kind: kString, How: byChart, Why: whyServing},
	{Name: "tls-cert-file", Kind: kString, How: byChart, Why: whyServing},
	{Name: "tls-private-key-file", Kind: kString, How: byChart, Why: whyServing},
	{Name: "tls-sni-cert-key", Kind: kString, How: byChart, Why: whyServing},
	{Name: "tls-cipher-suites", Kind: kList, How: noEquivalent, Why: "the binaries use Go's default cipher suites"},
	{Name: "tls-curve-preferences", Kind: kString, How: noEquivalent, Why: "the binaries use Go's default curves"},
	{Name: "tls-min-version", Kind: kString, How: toExtraArg, To: "tls-min-version", Accept: []string{"VersionTLS12", "VersionTLS13"},
		Else: "the binaries serve TLS 1.2 and up only"},
	{Name: "disable-http2-serving", Kind: kBool, How: noEquivalent, Why: "the binaries have no such setting"},
	{Name: "http2-max-streams-per-connection", Kind: kInt, How: noEquivalent, Why: "the binaries have no such setting"},
	{Name: "permit-address-sharing", Kind: kBool, How: byChart, Why: whyServing},
	{Name: "permit-port-sharing", Kind: kBool, How: byChart, Why: whyServing},
	{Name: "authentication-kubeconfig", Kind: kString, How: byChart, Why: whyHostCreds},
	{Name: "authorization-kubeconfig", Kind: kString, How: byChart, Why: whyHostCreds},
	{Name: "authentication-skip-lookup", Kind: kBool, How: byChart, Why: "the binaries authenticate with TokenReviews only (no client certificates to look up)"},
	{Name: "authentication-tolerate-lookup-failure", Kind: kBool, How: byChart, Why: "the binaries authenticate with TokenReviews only (no client certificates to look up)"},
	{Name: "client-ca-file", Kind: kString, How: byChart, Why: "the binaries authenticate with TokenReviews only, not client certificates"},
	{Name: "requestheader-allowed-names", Kind: kList, How: byChart, Why: "the binaries authenticate with TokenReviews only, not a front proxy's headers"},
	{Name: "requestheader-client-ca-file", Kind: kString, How: byChart, Why: "the binaries authenticate with TokenReviews only, not a front proxy's headers"},
	{Name: "requestheader-extra-headers-prefix", Kind: kList, How: byChart, Why: "the binaries authenticate with TokenReviews only, not a front proxy's headers"},
	{Name: "requestheader-group-headers", Kind: kList, How: byChart, Why: "the binaries authenticate with TokenReviews only, not a front proxy's headers"},
	{Name: "requestheader-uid-headers", Kind: kList, How: byChart, Why: "the binaries authenticate with TokenReviews only, not a front proxy's headers"},
	{Name: "requestheader-username-headers", Kind: kList, How: byChart, Why: "the binaries authenticate with TokenReviews only, not a front proxy's headers"},
	{Name: "authentication-token-webhook-cache-ttl", Kind: kDuration, How: toExtraArg, To: "authentication-token-webhook-cache-ttl"},
	{Name: "authorization-always-allow-paths", Kind: kList, How: toExtraArg, To: "authorization-always-allow-paths"},
	{Name: "authorization-webhook-cache-authorized-ttl", Kind: kDuration, How: toExtraArg, To: "authorization-webhook-cache-authorized-ttl"},
	{Name: "authorization-webhook-cache-unauthorized-ttl", Kind: kDuration, How: toExtraArg, To: "authorization-webhook-cache-unauthorized-ttl"},

	// Cloud provider.
	{Name: "cloud-provider", Kind: kString, How: notOurs, Owner: "cloud provider integration", Why: whyCloud},
	{Name: "cloud-config", Kind: kString, How: notOurs, Owner: "cloud provider integration", Why: whyCloud},
	{Name: "cluster-name", Kind: kString, How: notOurs, Owner: "cloud provider integration", Why: "names a cloud provider's resources; " + whyCloud},
	{Name: "configure-cloud-routes", Kind: kBool, How: notOurs, Owner: "node-route-controller", Why: whyCloud},
	{Name: "route-reconciliation-period", Kind: kDuration, How: notOurs, Owner: "node-route-controller", Why: whyCloud},
	{Name: "external-cloud-volume-plugin", Kind: kString, How: notOurs, Owner: "in-tree cloud volume plugins", Why: whyCloud},

	// endpoints-controller, endpointslice-controller, endpointslice-mirroring-controller.
	{Name: "concurrent-endpoint-syncs", Kind: kInt, How: toFlag, To: "concurrent-endpoint-syncs", For: []string{"endpoints"}},
	{Name: "endpoint-updates-batch-period", Kind: kDuration, How: toFlag, To: "endpoint-updates-batch-period", For: []string{"endpoints"}},
	{Name: "concurrent-service-endpoint-syncs", Kind: kInt, How: toFlag, To: "concurrent-service-endpoint-syncs", For: []string{"endpoints"}},
	{Name: "endpointslice-updates-batch-period", Kind: kDuration, How: toFlag, To: "endpointslice-updates-batch-period", For: []string{"endpoints"}},
	{Name: "max-endpoints-per-slice", Kind: kInt, How: toFlag, To: "max-endpoints-per-slice", For: []string{"endpoints"}},
	{Name: "mirroring-concurrent-service-endpoint-syncs", Kind: kInt, How: toFlag, To: "mirroring-concurrent-service-endpoint-syncs", For: []string{"endpoints"}},
	{Name: "mirroring-endpointslice-updates-batch-period", Kind: kDuration, How: toFlag, To: "mirroring-endpointslice-updates-batch-period", For: []string{"endpoints"}},
	{Name: "mirroring-max-endpoints-per-subset", Kind: kInt, How: toFlag, To: "mirroring-max-endpoints-per-subset", For: []string{"endpoints"}},

	// namespace-controller.
	{Name: "concurrent-namespace-syncs", Kind: kInt, How: toFlag, To: "concurrent-namespace-syncs", For: []string{"namespace"}},
	{Name: "namespace-sync-period", Kind: kDuration, How: toFlag, To: "namespace-sync-period", For: []string{"namespace"}},

	// node-lifecycle-controller, taint-eviction-controller, node-ipam-controller.
	{Name: "node-monitor-period", Kind: kDuration, How: toFlag, To: "node-monitor-period", For: []string{"nodelifecycle"}},
	{Name: "node-monitor-grace-period", Kind: kDuration, How: toFlag, To: "node-monitor-grace-period", For: []string{"nodelifecycle"}},
	{Name: "node-startup-grace-period", Kind: kDuration, How: toFlag, To: "node-startup-grace-period", For: []string{"nodelifecycle"}},
	{Name: "node-eviction-rate", Kind: kFloat, How: toFlag, To: "node-eviction-rate", For: []string{"nodelifecycle"}},
	{Name: "secondary-node-eviction-rate", Kind: kFloat, How: toFlag, To: "secondary-node-eviction-rate", For: []string{"nodelifecycle"}},
	{Name: "large-cluster-size-threshold", Kind: kInt, How: toFlag, To: "large-cluster-size-threshold", For: []string{"nodelifecycle"}},
	{Name: "unhealthy-zone-threshold", Kind: kFloat, How: toFlag, To: "unhealthy-zone-threshold", For: []string{"nodelifecycle"}},
	{Name: "allocate-node-cidrs", Kind: kBool, How: toFlag, To: "allocate-node-cidrs", For: []string{"nodelifecycle"}, NoteWhen: "true",
		Note: "controllers.nodelifecycle allocates the Nodes' Pod ranges (--allocate-node-cidrs): if the network plugin waits for them " +
			"(flannel, kube-router, host-local IPAM), set controllers.nodelifecycle.hostNetwork: true, as kube-controller-manager runs, " +
			"or a Node's Pod network and this Pod wait for each other (see values.yaml); two replicas then need two nodes"},
	{Name: "cluster-cidr", Kind: kString, How: toFlag, To: "cluster-cidr", For: []string{"nodelifecycle"}},
	{Name: "service-cluster-ip-range", Kind: kString, How: toFlag, To: "service-cluster-ip-range", For: []string{"nodelifecycle"}},
	{Name: "node-cidr-mask-size", Kind: kInt, How: toFlag, To: "node-cidr-mask-size", For: []string{"nodelifecycle"}},
	{Name: "node-cidr-mask-size-ipv4", Kind: kInt, How: toFlag, To: "node-cidr-mask-size-ipv4", For: []string{"nodelifecycle"}},
	{Name: "node-cidr-mask-size-ipv6", Kind: kInt, How: toFlag, To: "node-cidr-mask-size-ipv6", For: []string{"nodelifecycle"}},
	{Name: "cidr-allocator-type", Kind: kString, How: implicit, For: []string{"nodelifecycle"}, Accept: []string{"RangeAllocator"},
		Why:  "the binary's node IPAM is a range allocator",
		Else: "the binary's node IPAM is a range allocator only"},

	// persistentvolume-binder-controller.
	{Name: "pvclaimbinder-sync-period", Kind: kDuration, How: toFlag, To: "pvclaimbinder-sync-period", For: []string{"pvbinder"}},
	{Name: "enable-dynamic-provisioning", Kind: kBool, How: toFlag, To: "enable-dynamic-provisioning", For: []string{"pvbinder"}},
	{Name: "enable-hostpath-provisioner", Kind: kBool, How: toFlag, To: "enable-hostpath-provisioner", For: []string{"pvbinder"}},
	{Name: "pv-recycler-pod-template-filepath-nfs", Kind: kString, How: toFlag, To: "pv-recycler-pod-template-filepath-nfs", For: []string{"pvbinder"},
		Note: noteRecycler},
	{Name: "pv-recycler-pod-template-filepath-hostpath", Kind: kString, How: toFlag, To: "pv-recycler-pod-template-filepath-hostpath", For: []string{"pvbinder"},
		Note: noteRecycler},
	{Name: "pv-recycler-minimum-timeout-nfs", Kind: kInt, How: toFlag, To: "pv-recycler-minimum-timeout-nfs", For: []string{"pvbinder"}},
	{Name: "pv-recycler-increment-timeout-nfs", Kind: kInt, How: toFlag, To: "pv-recycler-increment-timeout-nfs", For: []string{"pvbinder"}},
	{Name: "pv-recycler-minimum-timeout-hostpath", Kind: kInt, How: toFlag, To: "pv-recycler-minimum-timeout-hostpath", For: []string{"pvbinder"}},
	{Name: "pv-recycler-timeout-increment-hostpath", Kind: kInt, How: toFlag, To: "pv-recycler-timeout-increment-hostpath", For: []string{"pvbinder"}},
	{Name: "flex-volume-plugin-dir", Kind: kString, How: notOurs, Owner: "persistentvolume-attach-detach-controller and persistentvolume-expander-controller",
		Why: "flex volumes are attached and expanded there; the binder loads no volume plugin"},

	// resourcequota-controller.
	{Name: "concurrent-resource-quota-syncs", Kind: kInt, How: toFlag, To: "concurrent-resource-quota-syncs", For: []string{"quota"}},
	{Name: "resource-quota-sync-period", Kind: kDuration, How: toFlag, To: "resource-quota-sync-period", For: []string{"quota"}},

	// service-lb-controller.
	{Name: "concurrent-service-syncs", Kind: kInt, How: toFlag, To: "concurrent-service-syncs", For: []string{"servicelb"}},

	// Controllers that stay in kube-controller-manager.
	{Name: "attach-detach-reconcile-sync-period", Kind: kDuration, How: notOurs, Owner: "persistentvolume-attach-detach-controller"},
	{Name: "disable-attach-detach-reconcile-sync", Kind: kBool, How: notOurs, Owner: "persistentvolume-attach-detach-controller"},
	{Name: "disable-force-detach-on-timeout", Kind: kBool, How: notOurs, Owner: "persistentvolume-attach-detach-controller"},
	{Name: "cluster-signing-cert-file", Kind: kString, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "cluster-signing-key-file", Kind: kString, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "cluster-signing-duration", Kind: kDuration, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "cluster-signing-kube-apiserver-client-cert-file", Kind: kString, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "cluster-signing-kube-apiserver-client-key-file", Kind: kString, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "cluster-signing-kubelet-client-cert-file", Kind: kString, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "cluster-signing-kubelet-client-key-file", Kind: kString, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "cluster-signing-kubelet-serving-cert-file", Kind: kString, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "cluster-signing-kubelet-serving-key-file", Kind: kString, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "cluster-signing-legacy-unknown-cert-file", Kind: kString, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "cluster-signing-legacy-unknown-key-file", Kind: kString, How: notOurs, Owner: "certificatesigningrequest-signing-controller"},
	{Name: "concurrent-deployment-syncs", Kind: kInt, How: notOurs, Owner: "deployment-controller"},
	{Name: "concurrent-device-taint-eviction-syncs", Kind: kInt, How: notOurs, Owner: "device-taint-eviction-controller"},
	{Name: "concurrent-resourceclaim-syncs", Kind: kInt, How: notOurs, Owner: "resourceclaim-controller"},
	{Name: "concurrent-statefulset-syncs", Kind: kInt, How: notOurs, Owner: "statefulset-controller"},
	{Name: "concurrent-daemonset-syncs", Kind: kInt, How: notOurs, Owner: "daemonset-controller"},
	{Name: "concurrent-ephemeralvolume-syncs", Kind: kInt, How: notOurs, Owner: "ephemeral-volume-controller"},
	{Name: "concurrent-gc-syncs", Kind: kInt, How: notOurs, Owner: "garbage-collector-controller"},
	{Name: "enable-garbage-collector", Kind: kBool, How: notOurs, Owner: "garbage-collector-controller"},
	{Name: "concurrent-horizontal-pod-autoscaler-syncs", Kind: kInt, How: notOurs, Owner: "horizontal-pod-autoscaler-controller"},
	{Name: "horizontal-pod-autoscaler-cpu-initialization-period", Kind: kDuration, How: notOurs, Owner: "horizontal-pod-autoscaler-controller"},
	{Name: "horizontal-pod-autoscaler-downscale-stabilization", Kind: kDuration, How: notOurs, Owner: "horizontal-pod-autoscaler-controller"},
	{Name: "horizontal-pod-autoscaler-initial-readiness-delay", Kind: kDuration, How: notOurs, Owner: "horizontal-pod-autoscaler-controller"},
	{Name: "horizontal-pod-autoscaler-sync-period", Kind: kDuration, How: notOurs, Owner: "horizontal-pod-autoscaler-controller"},
	{Name: "horizontal-pod-autoscaler-tolerance", Kind: kFloat, How: notOurs, Owner: "horizontal-pod-autoscaler-controller"},
	{Name: "concurrent-job-syncs", Kind: kInt, How: notOurs, Owner: "job-controller"},
	{Name: "concurrent-cron-job-syncs", Kind: kInt, How: notOurs, Owner: "cronjob-controller"},
	{Name: "legacy-service-account-token-clean-up-period", Kind: kDuration, How: notOurs, Owner: "legacy-serviceaccount-token-cleaner-controller"},
	{Name: "terminated-pod-gc-threshold", Kind: kInt, How: notOurs, Owner: "pod-garbage-collector-controller"},
	{Name: "concurrent-replicaset-syncs", Kind: kInt, How: notOurs, Owner: "replicaset-controller"},
	{Name: "concurrent-rc-syncs", Kind: kInt, How: notOurs, Owner: "replicationcontroller-controller"},
	{Name: "concurrent-serviceaccount-token-syncs", Kind: kInt, How: notOurs, Owner: "serviceaccount-token-controller"},
	{Name: "service-account-private-key-file", Kind: kString, How: notOurs, Owner: "serviceaccount-token-controller"},
	{Name: "root-ca-file", Kind: kString, How: notOurs, Owner: "serviceaccount-token-controller and root-ca-certificate-publisher-controller"},
	{Name: "concurrent-ttl-after-finished-syncs", Kind: kInt, How: notOurs, Owner: "ttl-after-finished-controller"},
	{Name: "concurrent-validating-admission-policy-status-syncs", Kind: kInt, How: notOurs, Owner: "validatingadmissionpolicy-status-controller"},
}

// lookupFlag finds a flag of the table by name.
func lookupFlag(name string) (kcmFlag, bool) {
	for _, f := range kcmFlags {
		if f.Name == name {
			return f, true
		}
	}
	return kcmFlag{}, false
}
