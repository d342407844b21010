package app

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/migration"
)

// errMembershipOver ends a term whose migrated controllers stopped because this process left
// the migration Lease's group (hand-back, loss) while it still leads its own Lease: run starts
// a next term, which waits for the group again.
var errMembershipOver = errors.New("migration Lease membership ended")

// What the fence lets through while migration is on, by what the current term runs.
const (
	termUnknown   int32 = iota // not classified yet, or nothing to run: no write leaves
	termNotListed              // no controller is migrated: the main Lease alone guards writes
	termMigrated               // writes need a fresh membership too
)

// migrationRun is a process's Leader Migration state: nil in Runtime when it is off.
type migrationRun struct {
	cfg    *migration.Config
	member *migration.Member
	phase  *migration.PhaseGauge
	retry  time.Duration
	term   atomic.Int32
	mu     sync.Mutex
	// stop ends the running membership term; nil when none runs.
	stop context.CancelFunc
}

// allowWrite is the fence's further condition (leader.Elector.FenceAlso). A refusal while
// the migrated controllers run ends their membership term.
func (m *migrationRun) allowWrite() bool {
	switch m.term.Load() {
	case termNotListed:
		return true
	case termMigrated:
		if m.member.Fresh() {
			return true
		}
		m.mu.Lock()
		stop := m.stop
		m.mu.Unlock()
		if stop != nil {
			stop()
		}
	}
	return false
}

// checkName names the always-passing /readyz check after the phase.
func (m *migrationRun) checkName() string { return "leaderMigration-" + string(m.phase.Get()) }

func alwaysOK(*http.Request) error { return nil }

// runMigrated runs controllers under Leader Migration: unowned ones never run; when any is
// migrated the term waits (Ready) for a membership in the migration Lease's group and runs them
// all while it lasts. Losing it, or a hand-back, stops them, leaves the group and ends the term
// with errMembershipOver.
func (rt *Runtime) runMigrated(ctx context.Context, controllers []Controller, factories []informer.Factory) error {
	m := rt.migration
	logger := klog.FromContext(ctx)
	names := controllerNames(controllers)
	filter := m.cfg.Filter(names)
	var run []Controller
	var migrated, unowned []string
	for _, c := range controllers {
		switch filter(c.Name) {
		case migration.Unowned:
			unowned = append(unowned, c.Name)
		case migration.Migrated:
			migrated = append(migrated, c.Name)
			run = append(run, c)
		default:
			run = append(run, c)
		}
	}
	ready := func() bool { return true }
	if len(run) == 0 {
		m.term.Store(termUnknown)
		m.phase.Set(migration.PhaseStandby)
		rt.SetSynced(ready)
		logger.Info("Leader migration: every controller belongs to another component; standing by", "unowned", unowned)
		<-ctx.Done()
		return nil
	}
	if len(migrated) == 0 {
		m.term.Store(termNotListed)
		m.phase.Set(migration.PhaseActive)
		logger.Info("Leader migration: no controller is migrated; running under this binary's Lease alone", "unowned", unowned)
		return rt.runControllers(ctx, run, factories)
	}
	m.term.Store(termMigrated)
	rt.SetSynced(ready) // waiting for the group is not a reason to be unready
	logger.Info("Leader migration: waiting to join the migration Lease's group", "lease", m.cfg.LeaderName, "migrated", migrated, "unowned", unowned)
	m.phase.Set(migration.PhaseWaiting)
	if m.member.HandingBack() {
		m.phase.Set(migration.PhaseHandingBack)
	}
	err := m.member.Acquire(ctx, func(handBack bool) {
		if handBack {
			m.phase.Set(migration.PhaseHandingBack)
		} else {
			m.phase.Set(migration.PhaseWaiting)
		}
	})
	if err != nil {
		// ctx ended while waiting; a join whose write was in flight may have landed: leave
		// (nothing is written if this process is not listed).
		_ = m.member.Leave(context.WithoutCancel(ctx))
		return nil
	}
	// The membership is renewed until the controllers have returned, not only until ctx
	// ends: after SIGTERM (or the own Lease lost) they drain, and their writes must still
	// pass the fence for as long as the own Lease's grace lets them.
	holdCtx, stopHold := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHold()
	memberCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.mu.Lock()
	m.stop = cancel
	m.mu.Unlock()
	held := make(chan error, 1)
	go func() {
		held <- m.member.Hold(holdCtx)
		cancel()
	}()
	m.phase.Set(migration.PhaseActive)
	start := time.Now()
	logger.Info("Leader migration: joined the migration Lease's group; starting the controllers", "lease", m.cfg.LeaderName)
	err = rt.runControllers(memberCtx, run, factories)
	// Stopped because the membership ended (Hold, or a write the fence refused), not by
	// ctx (shutdown, main Lease lost) nor by a controller of its own accord.
	byMembership := memberCtx.Err() != nil && ctx.Err() == nil
	cancel()
	stopHold()
	lost := <-held
	m.mu.Lock()
	m.stop = nil
	m.mu.Unlock()
	rt.SetSynced(ready)
	if m.member.HandingBack() {
		m.phase.Set(migration.PhaseHandingBack)
	} else {
		m.phase.Set(migration.PhaseWaiting)
	}
	// The controllers have returned: leave, releasing the Lease if last, even on shutdown.
	leaveErr := m.member.Leave(context.WithoutCancel(ctx))
	logger.Info("Leader migration: controllers stopped; left the migration Lease's group", "lease", m.cfg.LeaderName,
		"reason", lost, "active", time.Since(start).Round(time.Millisecond).String(), "leaveErr", leaveErr)
	if !byMembership {
		return err
	}
	if err != nil {
		logger.V(2).Info("Leader migration: controllers returned after the membership ended", "err", err)
	}
	return errMembershipOver
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
		case errors.Is(err, errProofLapsed):
			retry = rt.takeOver.retry
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
