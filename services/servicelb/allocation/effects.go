// What a decision returns: the effects the controller carries out after the state's lock is
// released, and the gauge snapshot taken as its last step.

package allocation

import (
	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
)

// Effects is what the controller must do after a decision, outside the lock: sync the
// Services and refresh the pool statuses named, and show the gauges.
type Effects struct {
	Requeue []string // Services to sync again
	Pools   []string // pools whose status to refresh
	Gauges  Gauges
}

// GaugeLevel says which gauges a decision changed.
type GaugeLevel int

// Gauge levels, from none to all.
const (
	GaugesNone    GaugeLevel = iota
	GaugesPending            // only the number of waiting Services
	GaugesAll
)

// Gauges are the state's numbers right after one decision. Seq orders them: decisions are
// published after the lock is released, so two may be published out of order, and the older
// must not overwrite the newer.
type Gauges struct {
	Seq   uint64
	Level GaugeLevel
	Totals
}

// Totals are the numbers the gauges show: usage per valid pool (by key), waiting Services
// by labels, unverified addresses by the pool last vouching for them ("" unknown).
type Totals struct {
	Pools      map[string]addrpool.Stats
	Pending    map[PendingLabels]int
	Unverified map[string]int
}

// The helpers below expect mu held; they record in e what a change implies.

// retryWaiting asks for every Service waiting for an address to be synced again: one has
// just freed up, or pools changed.
func (s *State) retryWaiting(e *Effects) {
	e.Requeue = append(e.Requeue, s.waiting()...)
	e.Gauges.Level = max(e.Gauges.Level, GaugesPending)
}

// stopWaitingFor takes key off the waiting list.
func (s *State) stopWaitingFor(key string, e *Effects) {
	if s.stopWaiting(key) {
		e.Gauges.Level = max(e.Gauges.Level, GaugesPending)
	}
}

// allocationChanged asks for every pool's status to be refreshed and the gauges shown.
func (s *State) allocationChanged(e *Effects) {
	e.Pools = s.poolNames()
	e.Gauges.Level = GaugesAll
}

// seal takes the gauge snapshot e asks for, as the last step of a decision.
func (s *State) seal(e *Effects) Effects {
	switch e.Gauges.Level {
	case GaugesPending:
		// Only the count: summing the pools' usage costs a pass over every address.
		s.seq++
		e.Gauges.Seq = s.seq
		e.Gauges.Pending = s.pendingByLabels()
	case GaugesAll:
		s.seq++
		e.Gauges.Seq = s.seq
		e.Gauges.Totals = s.totals()
	}
	return *e
}

// totals takes the valid pools' usage and counts the waiting Services and unverified
// addresses.
func (s *State) totals() Totals {
	t := Totals{Pools: map[string]addrpool.Stats{}, Unverified: map[string]int{}}
	for name, p := range s.pools {
		if p.Valid {
			t.Pools[name] = s.alloc.Stats(name)
		}
	}
	t.Pending = s.pendingByLabels()
	for _, m := range s.unverified {
		for a := range m {
			t.Unverified[s.origin[a]]++
		}
	}
	return t
}

// pendingByLabels counts the waiting Services by their gauge labels.
func (s *State) pendingByLabels() map[PendingLabels]int {
	out := map[PendingLabels]int{}
	for key := range s.pending {
		out[s.waitingAs[key]]++
	}
	return out
}
