package app

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/featuregate"

	"github.com/kcm-split/kcm-split/shared/app/takeover"
	"github.com/kcm-split/kcm-split/shared/health"
	"github.com/kcm-split/kcm-split/shared/metrics"
	"github.com/kcm-split/kcm-split/shared/migration"
	"github.com/kcm-split/kcm-split/shared/sharding"
)

// Runtime is what Spec.Run gets: clients, and hooks into health and metrics.
type Runtime struct {
	// Features are the --feature-gates in force, for the gates in Spec.FeatureGates.
	Features featuregate.FeatureGate
	Config   *rest.Config
	Client   kubernetes.Interface
	// Registry is the term's: its series start afresh each term and are served while it lasts.
	Registry *prometheus.Registry
	// ProcessRegistry is the process's: series that live as long as the process, among them
	// those Spec.ProcessMetrics made at its start.
	ProcessRegistry prometheus.Registerer
	Health          *health.Checks
	Logger          logr.Logger
	// Shard is this process's shard (sharding.Whole unless --shards > 1); ShardView, set when
	// sharded, builds the informers of namespaced resources for the shard's range.
	Shard     sharding.Shard
	ShardView *sharding.View
	// LeaseNamespace and LeaseName are the Lease this process campaigns for: state a
	// controller keeps for its next owner lives beside it (one owner: the holder).
	LeaseNamespace, LeaseName string

	minResync time.Duration
	synced    atomic.Pointer[func() bool]
	mu        sync.Mutex
	events    record.EventBroadcaster
	eventSink *termSink
	term      *metrics.TermRegistry
	migration *migrationRun
	takeOver  *takeover.Gate
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
		rt.eventSink = &termSink{sink: &typedcorev1.EventSinkImpl{Interface: rt.Client.CoreV1().Events("")}}
		b.StartRecordingToSink(rt.eventSink)
		rt.events = b
	}
	return rt.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
}

// eventDrain bounds how long a term's end waits for its Event writes in flight.
const eventDrain = 5 * time.Second

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
		b, sink := rt.events, rt.eventSink
		rt.events, rt.eventSink = nil, nil
		rt.mu.Unlock()
		if b != nil {
			b.Shutdown()
			// Before the Lease can be released: no Event of this term lands in the next one.
			if !sink.close(eventDrain) {
				rt.Logger.Info("An Event write of the ending term is still in flight; it may reach the apiserver after the Lease is released", "waited", eventDrain)
			}
		}
		rt.synced.Store(nil)
	}()
	return run(ctx, rt)
}

// leadTerms runs terms of spec.Run while this process leads its own Lease: a term that ended
// because the migration membership did, or the take-over's proof lapsed, is followed, after a
// retry period, by a next one that waits for the group, or the proof, again.
func (rt *Runtime) leadTerms(ctx context.Context, run func(context.Context, *Runtime) error) error {
	standby := func() {
		if rt.migration != nil {
			rt.migration.phase.Set(migration.PhaseStandby)
		}
	}
	for {
		if rt.migration != nil {
			rt.migration.term.Store(termUnknown) // nothing is written until RunControllers says what runs
		}
		err := rt.runTerm(ctx, run)
		var retry time.Duration
		switch {
		case errors.Is(err, errMembershipOver):
			retry = rt.migration.retry
		case errors.Is(err, takeover.ErrProofLapsed):
			retry = rt.takeOver.RetryPeriod()
		default:
			standby()
			return err
		}
		if migration.Sleep(ctx, retry) != nil {
			standby()
			return nil
		}
	}
}
