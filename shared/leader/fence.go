package leader

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Reasons a write is fenced, the reason label of kcm_split_leader_fenced_writes_total.
const (
	reasonNotLeading  = "not_leading"
	reasonStale       = "renewal_stale"
	reasonOtherHolder = "other_holder"
	// ReasonMigrationNotMember: the Lease is fresh, but a condition added with FenceAlso (the
	// migration Lease's membership) refused.
	ReasonMigrationNotMember = "migration_not_member"
	// ReasonKCMMayRun: the Lease is fresh, but --take-over-from-kcm's proof that
	// kube-controller-manager runs none of the controllers does not hold (FenceAlso).
	ReasonKCMMayRun = "kcm_may_run"
	// ReasonOtherLayout: the Lease is fresh, but a Lease of another shard layout of this
	// binary (--shards) is held and fresh (FenceAlso).
	ReasonOtherLayout = "other_shard_layout"
)

// extraFence is a further condition of AllowWrite, see FenceAlso.
type extraFence struct {
	reason string
	allow  func() bool
}

// FenceAlso makes AllowWrite also require allow() once the Lease checks pass; a refusal counts
// under reason and does not end the term of this Lease: allow's owner ends what it guards.
// Each call adds a condition; all must hold. Call it before Run.
func (e *Elector) FenceAlso(reason string, allow func() bool) {
	e.mu.Lock()
	e.extra = append(e.extra, &extraFence{reason: reason, allow: allow})
	e.mu.Unlock()
	e.fenced.WithLabelValues(reason)
}

// FencedError is returned for a mutating request that was refused before it left the
// process, because this process may no longer hold its Lease. It is not retried by client-go;
// the controller's term is ending when it is returned.
type FencedError struct {
	Lease  string
	Reason string
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("write refused: this process may no longer hold Lease %s (%s)", e.Lease, e.Reason)
}

// IsFenced reports whether err (possibly wrapped, as in a *url.Error) is a FencedError.
func IsFenced(err error) bool {
	var f *FencedError
	return errors.As(err, &f)
}

// AllowWrite returns nil when a mutating request may leave this process now: election is off,
// or this process leads, renewed the Lease less than the renew deadline ago (local monotonic
// clock), and has not seen another holder on the Lease. A standby acquires only after it has
// seen the Lease unchanged for a whole lease duration, so the last write that passes here
// precedes any takeover by at least lease duration minus renew deadline (5 s by default),
// whatever the process went through (a freeze, a GC pause, a partition).
//
// A refusal while leading ends the term at once: the controller stops, and the process
// stands by again.
func (e *Elector) AllowWrite() error {
	if !e.cfg.Enabled {
		return nil
	}
	e.mu.Lock()
	var reason string
	switch {
	case !e.leading:
		reason = reasonNotLeading
	case e.usurper != "":
		reason = reasonOtherHolder
	case time.Since(e.renewedAt) >= e.cfg.RenewDeadline:
		reason = reasonStale
	}
	extra := e.extra
	e.mu.Unlock()
	for _, x := range extra {
		if reason == "" && !x.allow() {
			e.fenced.WithLabelValues(x.reason).Inc()
			return &FencedError{Lease: e.cfg.Namespace + "/" + e.cfg.Name, Reason: x.reason}
		}
	}
	if reason == "" {
		return nil
	}
	e.fenced.WithLabelValues(reason).Inc()
	if reason != reasonNotLeading {
		e.stepDownFor(reason)
	}
	return &FencedError{Lease: e.cfg.Namespace + "/" + e.cfg.Name, Reason: reason}
}

// stepDownFor ends the current term, if any, giving reason.
func (e *Elector) stepDownFor(reason string) {
	e.mu.Lock()
	stop := e.stepDown
	if stop != nil && e.stepReason == "" {
		e.stepReason = reason
	}
	e.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Fence wraps a transport so that every mutating request (POST, PUT, PATCH, DELETE) is
// checked by AllowWrite at the moment it is sent, after client-side throttling. Use it on the
// controller's clients (rest.Config.Wrap), never on the election's own.
func (e *Elector) Fence(rt http.RoundTripper) http.RoundTripper {
	return fenceTransport{next: rt, e: e}
}

type fenceTransport struct {
	next http.RoundTripper
	e    *Elector
}

func (f fenceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if err := f.e.AllowWrite(); err != nil {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, err
		}
	}
	return f.next.RoundTrip(req)
}

// watchRenewals ends the term as soon as renewals are older than the renew deadline, even
// when the controller writes nothing (then nothing would trip the fence), so its workers and
// caches stop as promptly as its writes. It returns a function that stops it.
func (e *Elector) watchRenewals(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	period := e.cfg.RetryPeriod / 2
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			e.mu.Lock()
			stale := e.leading && time.Since(e.renewedAt) >= e.cfg.RenewDeadline
			e.mu.Unlock()
			if stale {
				e.stepDownFor(reasonStale)
				return
			}
		}
	}()
	return cancel
}
