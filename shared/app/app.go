// Package app is the lifecycle every kcm-split binary shares: flags (each also read from a
// KCM_SPLIT_ environment variable), logging, signals, the REST client, the metrics and health
// server, and leader election on the controller's own Lease. The controller itself is built
// and run only while this process leads.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/health"
	"github.com/kcm-split/kcm-split/shared/kube"
	"github.com/kcm-split/kcm-split/shared/leader"
	"github.com/kcm-split/kcm-split/shared/logging"
	"github.com/kcm-split/kcm-split/shared/metrics"
	"github.com/kcm-split/kcm-split/shared/migration"
	"github.com/kcm-split/kcm-split/shared/serving"
	"github.com/kcm-split/kcm-split/shared/sharding"
)

// Version is the kcm-split release, set at build time with
// -ldflags "-X github.com/kcm-split/kcm-split/shared/app.Version=v0.1.0".
var Version = "dev"

// How /readyz learns that the apiserver is unreachable: when nothing else has answered for a
// probe period, /livez of the apiserver is asked; no answer for apiserverUnreachableAfter
// fails the "apiserver" readiness check. /livez does not depend on it: a restart cannot help.
const (
	apiserverProbePeriod      = 3 * time.Second
	apiserverUnreachableAfter = 10 * time.Second
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1 // runtime failure, or a controller that did not stop after a lost Lease
	ExitUsage   = 2 // bad flags or environment
)

// Spec describes one controller binary.
type Spec struct {
	// ID is the controller ID: binary name, default Lease name, user agent.
	ID string
	// Usage is the one-line description shown by --help.
	Usage string
	// DefaultPort is the default port of the metrics and health server; each binary has its own
	// so that all of them run side by side on one host.
	DefaultPort int
	// DefaultQPS and DefaultBurst are the binary's client budget when --kube-api-qps and
	// --kube-api-burst are not given, shown as those flags' defaults by --help. Zero keeps
	// upstream's 20 and 30; a controller that costs several writes per object sets its own.
	DefaultQPS   float32
	DefaultBurst int
	// FeatureGates are the gates of --feature-gates that change what this controller does
	// (upstream's names, see shared/features); any other gate kube-controller-manager knows
	// is accepted and has no effect.
	FeatureGates []featuregate.Feature
	// Options are the controller's own settings, filled once from its flags. A Spec is
	// used for one run: parsing writes into Options.
	Options Options
	// Sharded gives the binary --shards and --shard-index (see shared/sharding): a shard
	// elects on a Lease of its own and its Run reads Runtime.Shard. Off, nothing changes.
	Sharded bool
	// Run builds informers and the controller and blocks until ctx ends. It is called only
	// while this process holds the Lease; the controller's settings are the Options the
	// Spec was built with (a closure over them), filled and validated by then.
	Run func(ctx context.Context, rt *Runtime) error
}

// Options are a controller's own settings. Flags returns its flags under upstream names,
// each bound to a field of the receiver (cli's Destination), so parsing fills the struct
// once and nothing reads a flag back by name; it must return new flag values on every call
// (parsing adds environment variables to them in place). Validate checks the filled
// settings; an error exits with ExitUsage and should name the flag (see FlagError).
type Options interface {
	Flags() []cli.Flag
	Validate() error
}

// Runtime is what Spec.Run gets: clients, and hooks into health and metrics.
type Runtime struct {
	// Features are the --feature-gates in force, for the gates in Spec.FeatureGates.
	Features featuregate.FeatureGate
	Config   *rest.Config
	Client   kubernetes.Interface
	Registry *prometheus.Registry
	Health   *health.Checks
	Logger   logr.Logger
	// Shard is this process's shard (sharding.Whole unless --shards > 1); ShardView, set when
	// sharded, builds the informers of namespaced resources for the shard's range.
	Shard     sharding.Shard
	ShardView *sharding.View

	minResync time.Duration
	synced    atomic.Pointer[func() bool]
	mu        sync.Mutex
	events    record.EventBroadcaster
	term      *metrics.TermRegistry
	migration *migrationRun
	takeOver  *takeOverRun
	layout    *sharding.Layout
}

// ResyncPeriod returns a random duration in [--min-resync-period, 2 x --min-resync-period),
// upstream's choice: informers of different controllers do not resync in lockstep, and keys a
// queue dropped after too many retries, or objects edited by hand, are reconciled eventually.
func (rt *Runtime) ResyncPeriod() time.Duration {
	return rt.minResync + time.Duration(rand.Int64N(int64(rt.minResync)))
}

// SetSynced registers the function /readyz asks while this process leads; until it returns
// true (caches synced) the leader is not Ready.
func (rt *Runtime) SetSynced(fn func() bool) { rt.synced.Store(&fn) }

// EventRecorder returns a recorder that writes core/v1 Events as component. The broadcaster
// is shared by every recorder of the term and stops only once Spec.Run has returned, so the
// Events of a drain after SIGTERM are still sent (a term that lost its Lease has them refused
// by the fence instead).
func (rt *Runtime) EventRecorder(ctx context.Context, component string) record.EventRecorder {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.events == nil {
		b := record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx)))
		b.StartStructuredLogging(3)
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: rt.Client.CoreV1().Events("")})
		rt.events = b
	}
	return rt.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
}

// runTerm runs spec.Run for one term of leadership with fresh per-term state: not Ready
// until this term's caches have synced, and an event broadcaster of its own, stopped after
// Run returns.
func (rt *Runtime) runTerm(ctx context.Context, run func(context.Context, *Runtime) error) error {
	rt.synced.Store(nil)
	if rt.layout != nil {
		// A shard of a new layout builds nothing while the old layout may still write.
		if err := rt.layout.Wait(ctx); err != nil {
			return nil // ctx ended while waiting: a clean end of the term
		}
	}
	if rt.term != nil {
		// Metrics of the term's controller live as long as the term: collectors reading its
		// listers never outlive them, and a next term starts its series afresh.
		rt.Registry = rt.term.Begin()
		defer rt.term.End()
	}
	defer func() {
		rt.mu.Lock()
		b := rt.events
		rt.events = nil
		rt.mu.Unlock()
		if b != nil {
			b.Shutdown()
		}
		rt.synced.Store(nil)
	}()
	return run(ctx, rt)
}

// FlagError reports a bad flag value; Main prints it on one line and exits with ExitUsage.
type FlagError = kube.FlagError

// Main runs the binary and exits the process.
func Main(spec Spec) {
	os.Exit(Run(context.Background(), spec, os.Args, os.Stderr))
}

// Run is Main without os.Exit: it returns the exit code. SIGINT and SIGTERM end ctx's work
// gracefully; a second signal exits at once. `<binary> check ...` checks a running controller
// instead (see CheckCommand).
func Run(ctx context.Context, spec Spec, args []string, stderr io.Writer) int {
	if len(args) > 1 && args[1] == CheckCommand {
		return runCheck(ctx, spec, args[2:], stderr)
	}
	o, cl, err := parse(spec, args[1:])
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", spec.ID, err)
		return ExitUsage
	case cl.help:
		printHelp(stderr, spec, cl.flags)
		// Last, after --help and --version: the subcommand's flags are not the controller's.
		fmt.Fprintf(stderr, "\nCOMMANDS:\n   %s %s [options]  check a running %s (its /readyz and its Lease's holder), exit 0 or 1; --help lists its options\n", spec.ID, CheckCommand, spec.ID)
		return ExitOK
	case cl.version:
		fmt.Fprintf(stderr, "%s version %s\n", spec.ID, Version)
		return ExitOK
	}
	err = run(ctx, spec, o, stderr)
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v\n", spec.ID, ue.err)
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", spec.ID, err)
		return ExitFailure
	}
}

// Parse applies the environment and args (without the program name) to spec's flags, filling
// spec.Options, and validates every setting, common and the controller's, as Run does before
// it connects anywhere. An error is what Run would print before exiting with ExitUsage.
func Parse(spec Spec, args []string) error {
	_, _, err := parse(spec, args)
	return err
}

// parse fills the common options and spec.Options from the environment and args, and
// validates them unless help or the version was asked for.
func parse(spec Spec, args []string) (*options, cmdline, error) {
	o := &options{}
	flags := append(o.flags(spec), o.shardingFlags(spec)...)
	if spec.Options != nil {
		flags = append(flags, spec.Options.Flags()...)
	}
	cl, err := parseCmdline(spec.ID, withEnv(flags), args)
	if err != nil || cl.help || cl.version {
		return o, cl, err
	}
	return o, cl, o.complete(spec, cl.ctx)
}

// usageError marks errors that exit with ExitUsage.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// options are the common settings; flags binds each common flag to one of its fields.
type options struct {
	kube      kube.Options
	qps       float64 // kube.QPS, as the flag's type
	leader    leader.Config
	log       logging.Options
	v         int
	format    string // --logging-format
	metrics   string
	health    string
	secure    serving.Options
	allowed   cli.StringSlice // secure.AlwaysAllowPaths, as the flag's type
	ttls      serving.CacheTTLs
	shutdown  time.Duration
	minResync time.Duration
	gateFlags cli.StringSlice // --feature-gates as given
	gates     featuregate.MutableVersionedFeatureGate
	// migrationEnabled and migrationPath are --enable-leader-migration and
	// --leader-migration-config; migration is the configuration read, nil when disabled.
	migrationEnabled bool
	migrationPath    string
	// migrationNamespace is --leader-migration-resource-namespace: where the migration Lease
	// is; empty means the binary's own Lease's namespace.
	migrationNamespace string
	migration          *migration.Config
	// shard is --shards and --shard-index; shardFlags tells whether either was given, which
	// makes the process take part in the layout protocol (labelled Lease, Layout fence).
	shard      sharding.Shard
	shardFlags bool
	shardBase  string // --leader-elect-resource-name as given: the unsharded Lease's name
	// takeOver is --take-over-from-kcm; takeOverOpts the --kcm-* flags it reads.
	takeOver     bool
	takeOverOpts TakeOverOptions
	// ignored lists the older logging flags given together with the upstream flag that
	// overrides them, to be logged once the logger exists.
	ignored [][2]string
}

// complete settles what the flags filled and validates it all, the controller's Options last.
// c tells which flags were given (command line or environment); no value is read from it.
func (o *options) complete(spec Spec, c *cli.Context) error {
	o.kube.QPS = float32(o.qps)
	o.leader.ShutdownGrace = o.shutdown
	o.secure.AlwaysAllowPaths = o.allowed.Value()
	o.ttls.Unauthenticated = serving.DefaultCacheTTLs.Unauthenticated
	if err := o.parseLogging(c); err != nil {
		return err
	}
	if err := o.kube.Validate(); err != nil {
		return err
	}
	if err := o.leader.Validate(); err != nil {
		return err
	}
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
	if o.minResync <= 0 {
		return &FlagError{Flag: FlagMinResyncPeriod, Err: fmt.Errorf("%s must be positive", o.minResync)}
	}
	if o.shutdown < 0 {
		return &FlagError{Flag: FlagShutdownGracePeriod, Err: fmt.Errorf("%s is negative", o.shutdown)}
	}
	if o.migrationEnabled {
		if !o.leader.Enabled {
			// Migrated controllers run only under both Leases; without election there is none.
			return &FlagError{Flag: FlagEnableMigration, Err: fmt.Errorf("needs --%s", FlagLeaderElect)}
		}
		cfg, err := migration.Load(o.migrationPath)
		if err != nil {
			return &FlagError{Flag: FlagMigrationConfig, Err: err}
		}
		o.migration = cfg
	}
	if o.takeOver {
		switch {
		case !o.leader.Enabled:
			// The proof gates writes through the fence, which exists only with election.
			return &FlagError{Flag: FlagTakeOver, Err: fmt.Errorf("needs --%s", FlagLeaderElect)}
		case o.migrationEnabled:
			return &FlagError{Flag: FlagTakeOver, Err: fmt.Errorf("and --%s are two ways of switching from kube-controller-manager: choose one", FlagEnableMigration)}
		case o.takeOverOpts.Namespace == "" || o.takeOverOpts.LeaseName == "":
			return &FlagError{Flag: FlagTakeOver, Err: fmt.Errorf("needs --%s and --%s", FlagKCMNamespace, FlagKCMLeaseName)}
		}
		sel, err := labels.Parse(o.takeOverOpts.PodSelector)
		if err != nil {
			return &FlagError{Flag: FlagKCMPodSelector, Err: err}
		}
		if sel.Empty() {
			// Every Pod of the namespace would have to prove the controllers off.
			return &FlagError{Flag: FlagKCMPodSelector, Err: errors.New("empty: it would select every Pod of the namespace")}
		}
	}
	if spec.Sharded {
		if err := o.shard.Validate(); err != nil {
			var se *sharding.Error
			if errors.As(err, &se) {
				return &FlagError{Flag: se.Field, Err: se.Err}
			}
			return err
		}
		o.shardFlags = c.IsSet(FlagShards) || c.IsSet(FlagShardIndex)
		o.shardBase = o.leader.Name
		if o.shardFlags {
			o.leader.Name = o.shard.LeaseName(o.leader.Name)
			o.leader.Labels = o.shard.LeaseLabels(spec.ID)
		}
	} else {
		o.shard = sharding.Whole
	}
	gates, err := features.Parse(o.gateFlags.Value())
	if err != nil {
		return &FlagError{Flag: FlagFeatureGates, Err: err}
	}
	o.gates = gates
	if spec.Options != nil {
		return spec.Options.Validate()
	}
	return nil
}

// parseLogging settles the logging options. Upstream's flags win over kcm-split's older
// names: --v over --log-level, --logging-format over --log-format, wherever each was given
// (command line or environment), so a --v added to a manifest that already passes
// --log-level takes effect.
func (o *options) parseLogging(c *cli.Context) error {
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

func run(parent context.Context, spec Spec, o *options, stderr io.Writer) error {
	zl, logger, err := logging.New(o.log)
	if err != nil {
		return usageError{err}
	}
	defer func() { _ = zl.Sync() }()
	if err := logging.RouteKlog(logger, o.log); err != nil {
		return usageError{err}
	}
	logger = logger.WithName(spec.ID)
	for _, ig := range o.ignored {
		logger.Info("Flag overridden by its upstream name", "flag", "--"+ig[0], "by", "--"+ig[1])
	}
	for _, name := range features.Named(o.gateFlags.Value()) {
		if !slices.Contains(spec.FeatureGates, featuregate.Feature(name)) {
			logger.Info("Feature gate has no effect on this controller", "gate", name, "actsOn", spec.FeatureGates)
		}
	}

	if soft, err := setMemoryLimitFromCgroup(); err == nil {
		logger.Info("Memory soft limit set from the container's limit", "GOMEMLIMIT", soft, "fraction", MemoryLimitFraction)
	}

	ctx, stop := signalContext(parent, logger)
	defer stop()
	ctx = klog.NewContext(ctx, logger)

	if o.leader.Identity == "" {
		if o.leader.Identity, err = leader.DefaultIdentity(); err != nil {
			return err
		}
	}
	// The identity in the user agent tells replicas apart in the audit log.
	o.kube.UserAgent = kube.UserAgent(spec.ID, Version, o.leader.Identity)
	cfg, err := kube.RESTConfig(o.kube)
	if err != nil {
		return usageError{err}
	}
	contact := kube.NewContact()
	cfg.Wrap(contact.Wrap)

	reg := metrics.NewRegistry()
	metrics.RegisterFeatureGates(reg, o.gates, spec.FeatureGates)
	checks := health.New()
	elector, err := leader.New(o.leader, leaderClient(cfg), reg)
	if err != nil {
		return err
	}
	// The controller's clients are fenced: no mutating request leaves the process unless
	// its Lease is fresh. The election's and the secure port's review clients are not.
	ctrlCfg := rest.CopyConfig(cfg)
	if o.leader.Enabled {
		ctrlCfg.Wrap(elector.Fence)
	}
	client, err := kubernetes.NewForConfig(ctrlCfg)
	if err != nil {
		return fmt.Errorf("building client: %w", err)
	}
	rt := &Runtime{Features: o.gates, minResync: o.minResync, Config: ctrlCfg, Client: client, Health: checks, Logger: logger, term: &metrics.TermRegistry{}, Shard: o.shard}
	if o.shard.Sharded() {
		rt.ShardView = sharding.NewView(o.shard, spec.ID, reg, logger)
	}
	if o.shardFlags && o.leader.Enabled {
		rt.layout = sharding.NewLayout(leaderClient(cfg), sharding.LayoutOptions{
			Binary: spec.ID, Namespace: o.leader.Namespace, BaseLease: o.shardBase, Shard: o.shard,
			LeaseDuration: o.leader.LeaseDuration, Recheck: o.leader.RetryPeriod,
		}, reg)
		rt.layout.Start(ctx)
		elector.FenceAlso(leader.ReasonOtherLayout, rt.layout.AllowWrite)
	}
	phase := migration.NewPhaseGauge(reg, migration.PhaseOff)
	if o.migration != nil {
		member := migration.NewMember(migration.Options{
			Namespace: cmp.Or(o.migrationNamespace, o.leader.Namespace), Name: o.migration.LeaderName, Identity: elector.Identity(), Binary: spec.ID,
			LeaseDuration: o.leader.LeaseDuration, RenewDeadline: o.leader.RenewDeadline, RetryPeriod: o.leader.RetryPeriod,
		}, leaderClient(cfg).CoordinationV1())
		rt.migration = &migrationRun{cfg: o.migration, member: member, phase: phase, retry: o.leader.RetryPeriod}
		phase.Set(migration.PhaseStandby)
		elector.FenceAlso(leader.ReasonMigrationNotMember, rt.migration.allowWrite)
		checks.AddNamed(rt.migration.checkName, alwaysOK, health.Readyz)
	}

	if o.takeOver {
		t, err := newTakeOver(client, o.takeOverOpts, o.leader.RetryPeriod, reg)
		if err != nil {
			return err
		}
		rt.takeOver = t
		t.watch.run(ctx)
		elector.FenceAlso(leader.ReasonKCMMayRun, t.allowWrite)
		checks.AddNamed(t.checkName, alwaysOK, health.Readyz)
	}

	checks.Add("leaderElection", elector.Check, health.Healthz, health.Livez)
	checks.Add("apiserver", contact.Check(apiserverUnreachableAfter), health.Readyz)
	probe, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building client: %w", err)
	}
	go contact.Probe(ctx, probe.Discovery().RESTClient(), apiserverProbePeriod)
	checks.Add("controller", func(*http.Request) error {
		if !elector.IsLeader() {
			return nil // a standby is Ready: it serves metrics and health
		}
		fn := rt.synced.Load()
		if fn == nil || !(*fn)() {
			return errors.New("leading, caches not synced yet")
		}
		return nil
	}, health.Readyz)

	srv, err := serve(logger, *o, cfg, reg, rt.term, checks)
	if err != nil {
		return err
	}

	logger.Info("Starting", "version", Version, "leaderElect", o.leader.Enabled, "lease", o.leader.Namespace+"/"+o.leader.Name, "identity", elector.Identity(), "shard", o.shard.String())
	if rt.layout != nil {
		// Campaign only once no other layout holds a Lease: a shard of the new layout that
		// held its Lease while waiting would fence the old layout's shards before they are
		// stopped. The wait in runTerm covers two layouts that started campaigning at once.
		if err := rt.layout.Wait(ctx); err != nil {
			srv.shutdown()
			logger.Info("Stopped")
			return nil
		}
	}
	err = elector.Run(ctx, func(ctx context.Context) error {
		return rt.leadTerms(ctx, spec.Run)
	})
	if errors.Is(err, leader.ErrLeaseLost) {
		// The Lease was lost and the controller did not stop: exit at once. Its writes are
		// fenced already; no graceful server shutdown.
		logger.Error(err, "Exiting")
		return err
	}
	srv.shutdown()
	if err != nil {
		logger.Error(err, "Exiting")
		return err
	}
	logger.Info("Stopped")
	return nil
}

// leaderClient is a client for the Lease alone, so that election requests are told apart in
// apiserver logs and never queue behind the controller's own under client-side throttling.
// The elector bounds each request itself (see leader.New).
func leaderClient(cfg *rest.Config) kubernetes.Interface {
	c := rest.CopyConfig(cfg)
	c.UserAgent = cfg.UserAgent + "/leader-election"
	return kubernetes.NewForConfigOrDie(c)
}

// signalContext ends ctx on the first SIGINT or SIGTERM and exits at once on the second.
func signalContext(parent context.Context, logger logr.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	stopped := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			logger.Info("Received signal, shutting down", "signal", s.String())
			cancel()
		case <-ctx.Done():
		case <-stopped:
			return
		}
		select {
		case s := <-ch:
			logger.Info("Received second signal, exiting now", "signal", s.String())
			os.Exit(ExitFailure)
		case <-stopped:
		}
	}()
	return ctx, func() { signal.Stop(ch); close(stopped); cancel() }
}
