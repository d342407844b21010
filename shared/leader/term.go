package leader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// termState is what one term shares between its acquisition attempts (each a fresh client-go
// elector), the lead it starts, and the goroutines that end an attempt.
type termState struct {
	ctx    context.Context // the process's: its end is a shutdown
	lead   func(context.Context) error
	logger logr.Logger
	lease  string
	grace  time.Duration

	started      atomic.Bool // lead was started in this term
	leadRunning  atomic.Bool // lead has not returned yet; the Lease must not be released
	deliberate   atomic.Bool // the election ended because lead returned while the Lease was ours
	graceExpired atomic.Bool // shutdown gave up waiting for lead
	leadDone     chan error
	shutdown     atomic.Int64       // when ctx ended (Unix ns), once it has
	lock         *interruptibleLock // of the last attempt: it knows whether the release landed
}

// shutdownAt is when the process's context ended (the drain began); now if it has not.
func (t *termState) shutdownAt() time.Time {
	if ns := t.shutdown.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Now()
}

// term runs acquisition attempts until this process has led once, and returns when that
// lead is over: done is false when the Lease was lost and lead stopped (stand by again).
func (e *Elector) term(ctx, electCtx context.Context, lead func(context.Context) error) (done bool, err error) {
	t := &termState{
		ctx:      ctx,
		lead:     lead,
		logger:   klog.FromContext(ctx),
		lease:    e.cfg.Namespace + "/" + e.cfg.Name,
		grace:    e.cfg.ShutdownGrace,
		leadDone: make(chan error, 1),
	}
	if t.grace <= 0 {
		t.grace = e.cfg.LeaseDuration
	}
	for {
		if err := e.attempt(electCtx, t); err != nil {
			return true, err
		}
		if t.started.Load() {
			return e.finishTerm(t)
		}
		if ctx.Err() != nil {
			return true, nil // shut down while standing by
		}
		// The attempt was interrupted to try again at once.
	}
}

// attempt runs one client-go elector until it ends: lead ran under it and returned or lost
// the Lease, the process shut down, or a wake-up (the Lease released or expired) abandoned it.
func (e *Elector) attempt(electCtx context.Context, t *termState) error {
	attemptCtx, cancelAttempt := context.WithCancel(electCtx)
	defer cancelAttempt()
	lock := &interruptibleLock{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name},
			Client:     e.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
			Labels:     e.cfg.Labels,
		},
		// client-go releases the Lease whenever its election ends, also after a failed
		// renewal; while our controller still runs that would hand a standby the Lease
		// with two writers live. Only a controller that has returned may release.
		mayRelease: func() bool { return !t.leadRunning.Load() },
		timeout:    e.cfg.RenewDeadline / 2,
		elector:    e,
	}
	t.lock = lock
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaseCtx context.Context) { e.runLead(t, leaseCtx, cancelAttempt) },
			OnStoppedLeading: e.endTerm,
			OnNewLeader: func(identity string) {
				if identity != e.cfg.Identity {
					t.logger.Info("New leader elected", "lease", t.lease, "identity", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	// client-go ties the watchdog to an elector only in RunOrDie; do it for each attempt.
	e.watchdog.SetLeaderElection(le)
	go func() {
		select {
		case <-e.wake:
			// The Lease was released, or has expired by the watch's count: client-go would
			// notice only at its next retry, up to 2.2 retry periods away (and a fresh
			// elector would wait a whole lease duration again); start over instead.
			if lock.interrupt(cancelAttempt) {
				t.logger.V(2).Info("Lease released or expired, trying to acquire it now", "lease", t.lease)
			}
		case <-attemptCtx.Done():
		}
	}()
	go e.endAttemptOnShutdown(attemptCtx, t, cancelAttempt)
	le.Run(attemptCtx)
	return nil
}

// runLead is OnStartedLeading: it runs lead until it returns, the Lease is lost (leaseCtx
// ends) or the process shuts down, and ends the attempt when lead returned while the Lease
// was still ours.
func (e *Elector) runLead(t *termState, leaseCtx context.Context, cancelAttempt context.CancelFunc) {
	// Mark the start before looking at ctx: the shutdown goroutine decides whether to wait
	// for lead by reading started after ctx ended, so either it sees started and waits, or
	// ctx had ended before this check and lead never starts.
	t.leadRunning.Store(true)
	t.started.Store(true)
	stopClock := context.AfterFunc(t.ctx, func() { t.shutdown.Store(time.Now().UnixNano()) })
	defer stopClock()
	if t.ctx.Err() != nil { // shutting down already: do not start work
		t.leadRunning.Store(false)
		t.deliberate.Store(true)
		t.leadDone <- nil
		cancelAttempt()
		return
	}
	t.logger.Info(MsgStartedLeading, "lease", t.lease, "identity", e.cfg.Identity)
	e.beginTerm(cancelAttempt)
	runCtx, cancel := context.WithCancel(t.ctx)
	// The term is over for IsLeader and the fence before the controller hears of it.
	stop := context.AfterFunc(leaseCtx, func() { e.endTerm(); cancel() })
	stopWatch := e.watchRenewals(leaseCtx)
	err := t.lead(runCtx)
	stopWatch()
	stop()
	cancel()
	// Only a lead that returned while the Lease was still ours ends the election
	// deliberately; one that returned because leaseCtx ended was stopped by a loss.
	if leaseCtx.Err() == nil {
		t.deliberate.Store(true)
		// The fence closes before the release is sent: a write a controller's stray goroutine
		// makes from now on is refused, so none can land after the next holder starts.
		e.endTerm()
		if t.ctx.Err() != nil {
			t.logger.Info(MsgFenced, "lease", t.lease, "drained", time.Since(t.shutdownAt()).Round(time.Millisecond))
		}
	}
	t.leadRunning.Store(false)
	t.leadDone <- err
	if t.deliberate.Load() {
		cancelAttempt()
	}
}

// endAttemptOnShutdown ends the attempt once the process shuts down: at once while standing
// by, and while leading once lead has drained or the grace has run out, whichever is first.
func (e *Elector) endAttemptOnShutdown(attemptCtx context.Context, t *termState, cancelAttempt context.CancelFunc) {
	select {
	case <-attemptCtx.Done():
		return
	case <-t.ctx.Done():
	}
	if t.started.Load() {
		select {
		case <-attemptCtx.Done(): // lead returned and ended the election, or the Lease was lost
			return
		case <-time.After(t.grace):
			t.logger.Info("Controller did not stop within the shutdown grace period; exiting without releasing the Lease", "grace", t.grace)
			t.graceExpired.Store(true)
		}
	}
	cancelAttempt()
}

// finishTerm settles a term in which lead was started: done and Run's result, or, when the
// Lease was lost while the controller ran and it stopped in time, done false (stand by again).
func (e *Elector) finishTerm(t *termState) (done bool, err error) {
	switch {
	case t.graceExpired.Load():
		return true, fmt.Errorf("controller did not stop within %s of shutdown; Lease %s left to expire", t.grace, t.lease)
	case t.deliberate.Load():
		err := <-t.leadDone
		if err == nil && t.ctx.Err() != nil {
			if released, relErr := t.lock.releaseOutcome(); released {
				t.logger.Info(MsgReleased, "lease", t.lease)
			} else {
				// Refused (RBAC gone with an uninstall, say) or never reached: the Lease is not
				// ours to write any more either way, and it expires by itself.
				t.logger.Info("Could not release the Lease; it expires after the lease duration", "lease", t.lease, "duration", e.cfg.LeaseDuration, "err", relErr)
			}
		}
		return true, err
	case t.ctx.Err() != nil:
		// Lost while shutting down: the controller may still be draining; nothing more is
		// written (the fence is closed), and the Lease is left to expire.
		return true, ErrLeaseLost
	}
	// The term ended by itself while the controller ran. Its context is cancelled; the fence
	// refuses its writes from now on. Wait for it to stop before standing by again, so that
	// a next term never overlaps with this one.
	e.mu.Lock()
	reason := cmp.Or(e.stepReason, "renewal failed")
	e.mu.Unlock()
	t.logger.Info("Lost the Lease; stopping the controller", "lease", t.lease, "reason", reason)
	select {
	case err := <-t.leadDone:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.logger.V(2).Info("Controller returned after losing the Lease", "err", err)
		}
		if t.ctx.Err() != nil {
			return true, nil
		}
		return false, nil
	case <-time.After(t.grace):
		t.logger.Info("Controller did not stop within the grace period after losing the Lease; exiting", "grace", t.grace)
		return true, ErrLeaseLost
	}
}
