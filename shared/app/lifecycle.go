package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/health"
	"github.com/kcm-split/kcm-split/shared/kube"
	"github.com/kcm-split/kcm-split/shared/leader"
	"github.com/kcm-split/kcm-split/shared/logging"
	"github.com/kcm-split/kcm-split/shared/metrics"
)

// How /readyz learns that the apiserver is unreachable: when nothing else has answered for a
// probe period, /livez of the apiserver is asked; no answer for apiserverUnreachableAfter
// fails the "apiserver" readiness check. /livez does not depend on it: a restart cannot help.
const (
	apiserverProbePeriod      = 3 * time.Second
	apiserverUnreachableAfter = 10 * time.Second
)

// process is what run builds before it campaigns: the clients, the election, the Runtime each
// term gets, and the registry and checks the servers publish.
type process struct {
	cfg     *rest.Config         // unfenced: the election's, the probe's and the secure port's
	client  kubernetes.Interface // the controller's, fenced
	contact *kube.Contact
	reg     *prometheus.Registry
	checks  *health.Checks
	elector *leader.Elector
	rt      *Runtime
}

// run is one process's life once its flags are settled: logging, signals, clients, election,
// servers, then terms of spec.Run while it leads, until a signal or a failure.
func run(parent context.Context, spec Spec, o *options, stderr io.Writer) error {
	zl, logger, err := logging.New(o.logging.log)
	if err != nil {
		return usageError{err}
	}
	defer func() { _ = zl.Sync() }()
	if err := logging.RouteKlog(logger, o.logging.log); err != nil {
		return usageError{err}
	}
	logger = logger.WithName(spec.ID)
	logSettled(logger, spec, o)

	ctx, stop := signalContext(parent, logger)
	defer stop()
	ctx = klog.NewContext(ctx, logger)

	p, err := newProcess(spec, o, logger)
	if err != nil {
		return err
	}
	p.startShard(ctx, spec, o)
	p.startMigration(spec, o)
	if err := p.startTakeOver(ctx, o); err != nil {
		return err
	}
	if err := p.addChecks(ctx); err != nil {
		return err
	}
	srv, err := serve(logger, o.serving, p.cfg, p.reg, p.rt.term, p.checks)
	if err != nil {
		return err
	}
	return p.lead(ctx, spec, o, srv)
}

// logSettled logs what parsing settled that the logger could not show then: older flags
// overridden, gates with no effect here, and the memory limit taken from the container.
func logSettled(logger logr.Logger, spec Spec, o *options) {
	for _, ig := range o.logging.ignored {
		logger.Info("Flag overridden by its upstream name", "flag", "--"+ig[0], "by", "--"+ig[1])
	}
	for _, name := range features.Named(o.features.flags.Value()) {
		if !slices.Contains(spec.FeatureGates, featuregate.Feature(name)) {
			logger.Info("Feature gate has no effect on this controller", "gate", name, "actsOn", spec.FeatureGates)
		}
	}
	if soft, err := setMemoryLimitFromCgroup(); err == nil {
		logger.Info("Memory soft limit set from the container's limit", "GOMEMLIMIT", soft, "fraction", MemoryLimitFraction)
	}
}

// newProcess builds the clients, the elector and the Runtime. The controller's clients are
// fenced: no mutating request leaves the process unless its Lease is fresh. The election's and
// the secure port's review clients are not.
func newProcess(spec Spec, o *options, logger logr.Logger) (*process, error) {
	if o.leader.Identity == "" {
		var err error
		if o.leader.Identity, err = leader.DefaultIdentity(); err != nil {
			return nil, err
		}
	}
	// The identity in the user agent tells replicas apart in the audit log.
	o.client.kube.UserAgent = kube.UserAgent(spec.ID, Version, o.leader.Identity)
	cfg, err := kube.RESTConfig(o.client.kube)
	if err != nil {
		return nil, usageError{err}
	}
	p := &process{cfg: cfg, contact: kube.NewContact(), reg: metrics.NewRegistry(), checks: health.New()}
	cfg.Wrap(p.contact.Wrap)
	metrics.RegisterFeatureGates(p.reg, o.features.gates, spec.FeatureGates)
	if spec.ProcessMetrics != nil {
		spec.ProcessMetrics(p.reg)
	}
	if p.elector, err = leader.New(o.leader, leaderClient(cfg), p.reg); err != nil {
		return nil, err
	}
	ctrlCfg := rest.CopyConfig(cfg)
	if o.leader.Enabled {
		ctrlCfg.Wrap(p.elector.Fence)
	}
	if p.client, err = kubernetes.NewForConfig(ctrlCfg); err != nil {
		return nil, fmt.Errorf("building client: %w", err)
	}
	p.rt = &Runtime{Features: o.features.gates, minResync: o.client.minResync, Config: ctrlCfg, Client: p.client, Health: p.checks, ProcessRegistry: p.reg,
		Logger: logger, term: &metrics.TermRegistry{}, Shard: o.sharding.shard, LeaseNamespace: o.leader.Namespace, LeaseName: o.leader.Name}
	return p, nil
}

// addChecks adds the election watchdog to /healthz and /livez, and to /readyz the apiserver's
// contact (probed from here on) and the controller's cache sync while leading.
func (p *process) addChecks(ctx context.Context) error {
	p.checks.Add("leaderElection", p.elector.Check, health.Healthz, health.Livez)
	p.checks.Add("apiserver", p.contact.Check(apiserverUnreachableAfter), health.Readyz)
	probe, err := kubernetes.NewForConfig(p.cfg)
	if err != nil {
		return fmt.Errorf("building client: %w", err)
	}
	go p.contact.Probe(ctx, probe.Discovery().RESTClient(), apiserverProbePeriod)
	p.checks.Add("controller", func(*http.Request) error {
		if !p.elector.IsLeader() {
			return nil // a standby is Ready: it serves metrics and health
		}
		fn := p.rt.synced.Load()
		if fn == nil || !(*fn)() {
			return errors.New("leading, caches not synced yet")
		}
		return nil
	}, health.Readyz)
	return nil
}

// lead campaigns and runs terms of spec.Run while this process leads, until ctx ends or a term
// fails, then stops the servers (not after a lost Lease whose controller did not stop: the
// process exits at once).
func (p *process) lead(ctx context.Context, spec Spec, o *options, srv *servers) error {
	logger := p.rt.Logger
	logger.Info("Starting", "version", Version, "leaderElect", o.leader.Enabled, "lease", o.leader.Namespace+"/"+o.leader.Name, "identity", p.elector.Identity(), "shard", o.sharding.shard.String())
	if p.rt.layout != nil {
		// Campaign only once no other layout holds a Lease: a shard of the new layout that
		// held its Lease while waiting would fence the old layout's shards before they are
		// stopped. The wait in runTerm covers two layouts that started campaigning at once.
		if err := p.rt.layout.Wait(ctx); err != nil {
			srv.shutdown()
			logger.Info("Stopped")
			return nil
		}
	}
	err := p.elector.Run(ctx, func(ctx context.Context) error {
		return p.rt.leadTerms(ctx, spec.Run)
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
