// Package takeover is --take-over-from-kcm: a binary's controllers run only while
// kube-controller-manager provably runs none of them, read from its Pods' --controllers and its
// Lease's holder, and stop, their writes refused at once, when that stops being provable.
package takeover

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// ErrProofLapsed ends a term (Gate.Run) whose controllers stopped because kube-controller-manager
// may run them again; the next term waits for the proof again.
var ErrProofLapsed = errors.New("no longer proven that kube-controller-manager runs none of the controllers")

// FlagLeaseHostNodes names the flag that fills Options.LeaseHostNodes.
const FlagLeaseHostNodes = "kcm-lease-host-nodes"

// Options say where kube-controller-manager's replicas and Lease are (the --kcm-* flags).
type Options struct {
	Namespace   string
	PodSelector string
	LeaseName   string
	// LeaseHostNodes maps the host a Lease identity names (lower case) to its Node's name,
	// where they differ: the kubelet's --hostname-override, kubeadm's nodeRegistration.name.
	LeaseHostNodes map[string]string
}

// Gate is a process's --take-over-from-kcm state: it watches kube-controller-manager's Pods and
// Lease for the process's lifetime, runs the controllers of a term only on proof that
// kube-controller-manager runs none of them, and lets writes leave only while that holds.
type Gate struct {
	watch   *kcmWatch
	recheck time.Duration // how often the proof is evaluated again without a change (expiry)
	retry   time.Duration
	allowed atomic.Bool
	proven  prometheus.Gauge
	lapses  prometheus.Counter
	state   atomic.Pointer[string]
	// names are the controllers of this process's last term (nil before its first): what
	// kcm_split_takeover_kcm_runs_controllers looks for in kube-controller-manager's Pods.
	names atomic.Pointer[[]string]
}

// New returns a Gate reading kube-controller-manager's Pods and Lease where opts say; retry is
// how long a term whose proof lapsed waits before the next (RetryPeriod). Its metrics,
// kcm_split_takeover_proven, kcm_split_takeover_kcm_runs_controllers and
// kcm_split_takeover_lapses_total, go to reg. Start it.
func New(client kubernetes.Interface, opts Options, retry time.Duration, reg prometheus.Registerer) (*Gate, error) {
	w, err := newKCMWatch(client, opts)
	if err != nil {
		return nil, err
	}
	g := &Gate{watch: w, recheck: time.Second, retry: retry, proven: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kcm_split_takeover_proven",
		Help: "1 while --take-over-from-kcm has proof that kube-controller-manager runs none of this binary's controllers (they run), 0 while this binary waits for it.",
	}), lapses: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kcm_split_takeover_lapses_total",
		Help: "Times --take-over-from-kcm's proof stopped holding while this binary's controllers ran on it (a kube-controller-manager Pod runs one again, or its Lease is held by a process the proof cannot place): they stopped, their writes refused, and the binary waits for the proof again.",
	})}
	// Read at each scrape, so it is never stale, whoever leads now.
	runs := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kcm_split_takeover_kcm_runs_controllers",
		Help: "1 while a kube-controller-manager Pod (--kcm-pod-selector) runs one of this binary's controllers by its --controllers, 0 while none does, -1 while that cannot be told: the Pods not read yet, a Pod's --controllers unreadable, or this process not yet led (a term names the controllers).",
	}, g.kcmRuns)
	reg.MustRegister(g.proven, g.lapses, runs)
	g.setState("waiting")
	return g, nil
}

// kcmRuns is kcm_split_takeover_kcm_runs_controllers' value now.
func (g *Gate) kcmRuns() float64 {
	names := g.names.Load()
	if names == nil {
		return -1
	}
	return kcmRunsAny(*names, g.watch.view())
}

// Start reads kube-controller-manager's Pods and Lease until ctx ends.
func (g *Gate) Start(ctx context.Context) { g.watch.run(ctx) }

// RetryPeriod is how long to wait after a term ended with ErrProofLapsed before the next.
func (g *Gate) RetryPeriod() time.Duration { return g.retry }

func (g *Gate) setState(s string) { g.state.Store(&s) }

// CheckName names the always-passing /readyz check after the state: waiting or active.
func (g *Gate) CheckName() string { return "kcmTakeOver-" + *g.state.Load() }

// AllowWrite is the fence's further condition (leader.Elector.FenceAlso): writes leave only
// while the proof holds.
func (g *Gate) AllowWrite() bool { return g.allowed.Load() }

// wait blocks until the proof holds (nil) or ctx ends.
func (g *Gate) wait(ctx context.Context, names []string) error {
	logger := klog.FromContext(ctx)
	last := ""
	for {
		v, why := proveKCMOff(names, g.watch.view(), time.Now())
		if v == proven {
			logger.Info("Take-over: kube-controller-manager runs none of the controllers; starting them", "controllers", names, "proof", why)
			return nil
		}
		if why != last {
			logger.Info("Take-over: waiting for proof that kube-controller-manager runs none of the controllers", "controllers", names, "reason", why)
			last = why
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-g.watch.changed:
		case <-time.After(g.recheck):
		}
	}
}

// Run calls run, the term's controllers, once kube-controller-manager provably runs none of
// those named, and ends its context (their writes refused at once) when that stops being
// provable; the term then ends with ErrProofLapsed. It returns nil if ctx ends while waiting,
// else what run returned.
func (g *Gate) Run(ctx context.Context, names []string, run func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	g.names.Store(&names)
	if err := g.wait(ctx, names); err != nil {
		return nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g.allowed.Store(true)
	g.proven.Set(1)
	g.setState("active")
	lapsed := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-runCtx.Done():
				return
			case <-g.watch.changed:
			case <-time.After(g.recheck):
			}
			if v, why := proveKCMOff(names, g.watch.view(), time.Now()); v == unproven {
				g.allowed.Store(false) // first: nothing leaves from now on
				g.lapses.Inc()
				logger.Info("Take-over: kube-controller-manager may run the controllers again; stopping them", "controllers", names, "reason", why)
				close(lapsed)
				cancel()
				return
			}
		}
	}()
	err := run(runCtx)
	g.allowed.Store(false)
	cancel()
	<-watched
	g.proven.Set(0)
	g.setState("waiting")
	select {
	case <-lapsed:
		if ctx.Err() == nil {
			return ErrProofLapsed
		}
	default:
	}
	return err
}
