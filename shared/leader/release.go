package leader

import (
	"context"
	"encoding/json"
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

// watchLease watches this Elector's Lease for as long as ctx lasts, and acts on what it sees:
//   - released (no holder) while standing by: try to acquire at once, instead of at the next
//     retry tick (this is what makes a SIGTERM handover take milliseconds);
//   - held by another process: remember when this renewal was first seen, and try to acquire
//     the moment it has gone unrenewed for its lease duration (a takeover at expiry, not up to
//     2.2 retry periods later);
//   - held by another process while this one leads: end the term at once.
func (e *Elector) watchLease(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(e.client, 0,
		informers.WithNamespace(e.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", e.cfg.Name).String()
		}))
	observe := func(obj any) {
		lease, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		e.observe(recordOf(resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)))
	}
	_, _ = factory.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe, // a Lease already there when we start watching
		UpdateFunc: func(_, obj any) { observe(obj) },
	})
	factory.Start(ctx.Done())
	context.AfterFunc(ctx, func() {
		e.mu.Lock()
		if e.expiry != nil {
			e.expiry.Stop()
		}
		e.mu.Unlock()
	})
}

func (e *Elector) observe(rec leaseRecord) {
	e.mu.Lock()
	if rec == e.seen && !e.seenAt.IsZero() {
		e.mu.Unlock()
		return // a relist or resync: not a renewal
	}
	e.seen, e.seenAt = rec, time.Now()
	if e.expiry != nil {
		e.expiry.Stop()
		e.expiry = nil
	}
	leading := e.leading
	ours := rec.holder == e.cfg.Identity
	switch {
	case rec.holder == "":
		e.mu.Unlock()
		if !leading {
			e.wakeUp()
		}
		return
	case ours:
		e.confirmed = leading
		e.mu.Unlock()
		return
	case leading && e.confirmed:
		// Only after the watch has shown our own holding in this term: events arrive in
		// order, so a renewal by the previous holder delivered late is not taken for a loss.
		e.usurper = rec.holder
		e.mu.Unlock()
		e.stepDownFor(reasonOtherHolder)
		return
	case leading:
		e.mu.Unlock()
		return // an event from before this term, delivered late
	}
	// Another holder's renewal: it expires a lease duration after we saw it, unless renewed.
	// The timer only wakes the election; whether the Lease really expired is decided on a
	// fresh read (see interruptibleLock.Get), conditioned on its resourceVersion.
	seen := rec
	e.expiry = time.AfterFunc(rec.duration+time.Millisecond, func() {
		e.mu.Lock()
		same := e.seen == seen
		e.mu.Unlock()
		if same {
			e.wakeUp()
		}
	})
	e.mu.Unlock()
}

// expiredByWatch reports whether rec, just read from the apiserver, is a renewal by another
// holder that the watch saw more than its lease duration ago and that has not changed since.
func (e *Elector) expiredByWatch(rec *resourcelock.LeaderElectionRecord) bool {
	r := recordOf(rec)
	if r.holder == "" || r.holder == e.cfg.Identity {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return r == e.seen && !e.seenAt.IsZero() && time.Since(e.seenAt) > r.duration
}

var (
	errAttemptInterrupted  = errors.New("acquisition attempt interrupted to retry at once")
	errReleaseWhileRunning = errors.New("not releasing the Lease while the controller still runs")
	errReleaseNotOurs      = errors.New("not releasing a Lease another process holds")
)

// interruptibleLock lets a standby's acquisition attempt be abandoned safely: once a write has
// made this process the holder, interrupt refuses, so an attempt is never cancelled between
// winning the Lease and starting to lead (which would release it again and look like a loss).
// It also records each successful renewal for the fence, and presents a Lease the watch has
// seen expire as free.
type interruptibleLock struct {
	resourcelock.Interface
	// mayRelease guards writes that give the Lease up (an empty holder).
	mayRelease func() bool
	// timeout bounds each request, so one hung call cannot use up the renew deadline. (A
	// client-wide timeout would also cut the Lease watch every few seconds.)
	timeout     time.Duration
	elector     *Elector
	mu          sync.Mutex
	held        bool
	interrupted bool
	// readHolder is the holder of the Lease as last read from the apiserver.
	readHolder string
	// released: a write giving the Lease up landed; releaseErr: why the last one did not.
	released   bool
	releaseErr error
}

// releaseOutcome reports whether this lock gave the Lease up, or why its last try failed (nil
// when none was made).
func (l *interruptibleLock) releaseOutcome() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released, l.releaseErr
}

func (l *interruptibleLock) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.timeout)
}

// Get reads the Lease. A renewal by another holder that the watch has seen unchanged for
// longer than its lease duration is presented without a holder: client-go would otherwise
// start its own count of a lease duration from this read. The update that follows is
// conditioned on the resourceVersion read here, so a renewal that lands meanwhile wins.
func (l *interruptibleLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	ctx, cancel := l.bound(ctx)
	defer cancel()
	rec, raw, err := l.Interface.Get(ctx)
	l.mu.Lock()
	l.readHolder = ""
	if err == nil {
		l.readHolder = rec.HolderIdentity
	}
	l.mu.Unlock()
	if err != nil || l.elector == nil || !l.elector.expiredByWatch(rec) {
		return rec, raw, err
	}
	expired := *rec
	expired.HolderIdentity = ""
	raw, err = json.Marshal(expired)
	if err != nil {
		return nil, nil, err
	}
	return &expired, raw, nil
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
	// client-go releases after the read that precedes it without looking at who holds the
	// Lease now (it trusts its last observation): after losing the Lease to another process
	// that would clear the new holder's Lease. Release only a Lease read as ours.
	if rec.HolderIdentity == "" && l.readHolder != l.Identity() {
		return errReleaseNotOurs
	}
	sent := time.Now()
	// The term this write extends counts from the renewTime it stamps, if that is earlier (a
	// process frozen between stamping and sending): an observer that judges a Lease by its
	// renewTime (sharding.Layout) relies on no write after renewTime + renew deadline. A
	// wall-clock step can only make this earlier.
	if gap := sent.Sub(rec.RenewTime.Time); !rec.RenewTime.IsZero() && gap > 0 {
		sent = sent.Add(-gap)
	}
	err := fn()
	if rec.HolderIdentity == "" {
		l.released, l.releaseErr = err == nil, err
	}
	if err == nil {
		l.held = rec.HolderIdentity == l.Identity()
		if l.held && l.elector != nil {
			l.elector.renewed(sent)
		}
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
