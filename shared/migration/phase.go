package migration

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// Phase is where a binary stands in Leader Migration.
type Phase string

// The phases, values of kcm_split_leader_migration_phase's phase label.
const (
	// PhaseOff: --enable-leader-migration is not given; controllers run as without it.
	PhaseOff Phase = "off"
	// PhaseStandby: not running controllers as a migration owner: every controller of the
	// binary belongs to another component, or this replica does not lead its own Lease.
	PhaseStandby Phase = "standby"
	// PhaseWaiting: leading its own Lease, waiting to join the migration Lease's group.
	PhaseWaiting Phase = "waiting"
	// PhaseActive: running its controllers (a member of the group when any is migrated).
	PhaseActive Phase = "active"
	// PhaseHandingBack: the migration Lease carries AnnotationHandBack: migrated controllers
	// stop, and the binary does not join again until it is removed.
	PhaseHandingBack Phase = "handing-back"
)

// phases lists every phase.
var phases = []Phase{PhaseOff, PhaseStandby, PhaseWaiting, PhaseActive, PhaseHandingBack}

// PhaseGauge is the kcm_split_leader_migration_phase gauge: 1 for the current phase, 0 for the others.
type PhaseGauge struct {
	mu    sync.Mutex
	cur   Phase
	gauge *prometheus.GaugeVec
}

// NewPhaseGauge registers the gauge on reg (if not nil) in phase initial.
func NewPhaseGauge(reg prometheus.Registerer, initial Phase) *PhaseGauge {
	g := metrics.With(reg).NewGaugeVec(prometheus.GaugeOpts{
		Name: "kcm_split_leader_migration_phase",
		Help: "Leader Migration phase of this process: 1 for the current one of off, standby, waiting, active, handing-back.",
	}, []string{"phase"})
	p := &PhaseGauge{gauge: g}
	p.Set(initial)
	return p
}

// Set makes phase the current one.
func (p *PhaseGauge) Set(phase Phase) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur = phase
	for _, ph := range phases {
		v := 0.0
		if ph == phase {
			v = 1
		}
		p.gauge.WithLabelValues(string(ph)).Set(v)
	}
}

// Get returns the current phase.
func (p *PhaseGauge) Get() Phase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}
