package leader

import (
	"context"
	"errors"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// watchReleases watches this Elector's Lease and signals (without blocking, coalescing)
// whenever it is seen without a holder, which is how client-go releases a Lease on shutdown.
// A standby uses the signal to try at once rather than at its next retry tick; this is what
// makes a SIGTERM handover take milliseconds instead of up to 2.2 retry periods.
func (e *Elector) watchReleases(ctx context.Context) <-chan struct{} {
	released := make(chan struct{}, 1)
	factory := informers.NewSharedInformerFactoryWithOptions(e.client, 0,
		informers.WithNamespace(e.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", e.cfg.Name).String()
		}))
	notify := func(obj any) {
		lease, ok := obj.(*coordinationv1.Lease)
		if !ok || e.IsLeader() {
			return
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			select {
			case released <- struct{}{}:
			default:
			}
		}
	}
	_, _ = factory.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify, // a Lease already free when we start watching
		UpdateFunc: func(_, obj any) { notify(obj) },
	})
	factory.Start(ctx.Done())
	return released
}

var (
	errAttemptInterrupted  = errors.New("acquisition attempt interrupted to retry at once")
	errReleaseWhileRunning = errors.New("not releasing the Lease while the controller still runs")
)

// interruptibleLock lets a standby's acquisition attempt be abandoned safely: once a write has
// made this process the holder, interrupt refuses, so an attempt is never cancelled between
// winning the Lease and starting to lead (which would release it again and look like a loss).
type interruptibleLock struct {
	resourcelock.Interface
	// mayRelease guards writes that give the Lease up (an empty holder).
	mayRelease func() bool
	// timeout bounds each request, so one hung call cannot use up the renew deadline. (A
	// client-wide timeout would also cut the Lease watch every few seconds.)
	timeout     time.Duration
	mu          sync.Mutex
	held        bool
	interrupted bool
}

func (l *interruptibleLock) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.timeout)
}

func (l *interruptibleLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	ctx, cancel := l.bound(ctx)
	defer cancel()
	return l.Interface.Get(ctx)
}

func (l *interruptibleLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(rec, func() error {
		ctx, cancel := l.bound(ctx)
		defer cancel()
		return l.Interface.Create(ctx, rec)
	})
}

func (l *interruptibleLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(rec, func() error {
		ctx, cancel := l.bound(ctx)
		defer cancel()
		return l.Interface.Update(ctx, rec)
	})
}

func (l *interruptibleLock) write(rec resourcelock.LeaderElectionRecord, fn func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.interrupted {
		return errAttemptInterrupted
	}
	if rec.HolderIdentity == "" && l.mayRelease != nil && !l.mayRelease() {
		return errReleaseWhileRunning
	}
	err := fn()
	if err == nil {
		l.held = rec.HolderIdentity == l.Identity()
	}
	return err
}

// interrupt calls cancel unless this process holds, or is writing, the Lease. It reports
// whether it did.
func (l *interruptibleLock) interrupt(cancel context.CancelFunc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		return false
	}
	l.interrupted = true
	cancel()
	return true
}
