package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/health"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/leader"
	"github.com/kcm-split/kcm-split/shared/migration"
)

// migrationOptions are --enable-leader-migration and the flags it reads.
type migrationOptions struct {
	enabled bool   // --enable-leader-migration
	path    string // --leader-migration-config
	// namespace is --leader-migration-resource-namespace: where the migration Lease is; empty
	// means the binary's own Lease's namespace.
	namespace string
	config    *migration.Config // read from path; nil when disabled
}

func (o *migrationOptions) flags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{
			Name:        FlagEnableMigration,
			Category:    "Leader election",
			Destination: &o.enabled,
			Usage: "take part in Leader Migration with kube-controller-manager: controllers the --" +
				FlagMigrationConfig +
				" file gives to kcm-split (or *) run only while kcm-split's binaries hold its migration Lease " +
				"together, those it gives to another component never run here; needs --" +
				FlagLeaderElect,
		},
		&cli.StringFlag{
			Name:        FlagMigrationConfig,
			Category:    "Leader election",
			Destination: &o.path,
			Usage: "path of the LeaderMigrationConfiguration file (controllermanager.config.k8s.io, resourceLock " +
				"leases) read with --" +
				FlagEnableMigration +
				"; empty means every controller of this binary goes to kcm-split under the Lease " +
				migration.DefaultLeaderName,
		},
		&cli.StringFlag{
			Name:        FlagMigrationNamespace,
			Category:    "Leader election",
			Destination: &o.namespace,
			Usage: "namespace of the migration Lease: kube-controller-manager's --" +
				FlagLeaseNamespace +
				"; empty means this binary's --" +
				FlagLeaseNamespace +
				" (upstream's choice: one namespace for both Leases)",
		},
	}
}

// complete reads the migration configuration when migration is on.
func (o *migrationOptions) complete(election leader.Config) error {
	if !o.enabled {
		return nil
	}
	if !election.Enabled {
		// Migrated controllers run only under both Leases; without election there is none.
		return &FlagError{Flag: FlagEnableMigration, Err: fmt.Errorf("needs --%s", FlagLeaderElect)}
	}
	cfg, err := migration.Load(o.path)
	if err != nil {
		return &FlagError{Flag: FlagMigrationConfig, Err: err}
	}
	o.config = cfg
	return nil
}

// startMigration registers the migration phase gauge (off unless migration is on) and, when it
// is on, makes the process a candidate member of the migration Lease's group: writes also need
// a fresh membership while migrated controllers run, and /readyz names the phase.
func (p *process) startMigration(spec Spec, o *options) {
	phase := migration.NewPhaseGauge(p.reg, migration.PhaseOff)
	if o.migration.config == nil {
		return
	}
	member := migration.NewMember(migration.Options{
		Namespace: cmp.Or(o.migration.namespace, o.leader.Namespace), Name: o.migration.config.LeaderName, Identity: p.elector.Identity(), Binary: spec.ID,
		LeaseDuration: o.leader.LeaseDuration, RenewDeadline: o.leader.RenewDeadline, RetryPeriod: o.leader.RetryPeriod,
	}, leaderClient(p.cfg).CoordinationV1())
	p.rt.migration = &migrationRun{cfg: o.migration.config, member: member, phase: phase, retry: o.leader.RetryPeriod}
	phase.Set(migration.PhaseStandby)
	p.elector.FenceAlso(leader.ReasonMigrationNotMember, p.rt.migration.allowWrite)
	p.checks.AddNamed(p.rt.migration.checkName, alwaysOK, health.Readyz)
}

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
	run, migrated, unowned := m.sort(controllers)
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
	if err := m.join(ctx); err != nil {
		return nil // ctx ended while waiting
	}
	return rt.runAsMember(ctx, run, factories)
}

// sort tells the controllers apart by what the migration configuration says of them: run are
// those this binary runs (migrated or not listed), migrated and unowned name those it gives to
// kcm-split and to another component.
func (m *migrationRun) sort(controllers []Controller) (run []Controller, migrated, unowned []string) {
	filter := m.cfg.Filter(controllerNames(controllers))
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
	return run, migrated, unowned
}

// join waits for a membership in the migration Lease's group, showing the phase (waiting, or
// handing back) meanwhile. An error means ctx ended first.
func (m *migrationRun) join(ctx context.Context) error {
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
		// A join whose write was in flight may have landed: leave (nothing is written if this
		// process is not listed).
		_ = m.member.Leave(context.WithoutCancel(ctx))
	}
	return err
}

// runAsMember runs controllers while this process is a member of the migration Lease's group,
// then leaves it. A term stopped because the membership ended returns errMembershipOver.
func (rt *Runtime) runAsMember(ctx context.Context, run []Controller, factories []informer.Factory) error {
	m := rt.migration
	logger := klog.FromContext(ctx)
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
	err := rt.runControllers(memberCtx, run, factories)
	// Stopped because the membership ended (Hold, or a write the fence refused), not by
	// ctx (shutdown, main Lease lost) nor by a controller of its own accord.
	byMembership := memberCtx.Err() != nil && ctx.Err() == nil
	cancel()
	stopHold()
	lost := <-held
	m.mu.Lock()
	m.stop = nil
	m.mu.Unlock()
	rt.SetSynced(func() bool { return true })
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
