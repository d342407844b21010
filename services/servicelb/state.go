// Allocation state: which address belongs to which Service, and the bookkeeping the
// decisions need (pools as last parsed, Services waiting, reasons already reported, the
// status last written). It holds no client and sends nothing; the Controller turns what
// its methods return into queue adds, Events and metrics, after the lock is released.
//
// Its lock is its own: every method the Controller calls takes it for exactly one decision
// (read the state, decide, change it) and returns what follows from it, so the Controller
// never holds it and never sees the maps. The decision of which addresses a Service holds
// is in state_assign.go.

package servicelb

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
)

// allocations is the controller's allocation state. Workers and event handlers share it:
// mu makes every decision over it one at a time; the API writes that follow a decision are
// not made under it.
type allocations struct {
	mu sync.Mutex
	// seq numbers the gauge snapshots (see gauges).
	seq   uint64
	alloc *addrpool.Allocator
	pools map[string]*poolInfo
	// apis are the pool APIs read, in --pool-api's order; it decides which annotations
	// count and the order of candidate pools. Set at construction.
	apis []string
	// pending are the Services waiting for an address; waitingAs their gauge labels.
	pending   map[string]bool
	waitingAs map[string]pendingLabels
	// badInput is the last invalid request reported per Service, to report it once.
	badInput map[string]string
	// restored: the state was rebuilt from Service status and claims.
	restored bool
	// origin is the pool each held address was last seen in: a pool that is still valid
	// but no longer contains it is a verified reason to move it; a deleted or invalid one
	// is not.
	origin map[netip.Addr]string
	// unverified are the addresses kept without a pool vouching for them, per Service,
	// with the reason.
	unverified map[string]map[netip.Addr]string
	// lastWritten is the ingress this controller last wrote per Service; overwrites track
	// the Services whose status someone else keeps changing away from it.
	lastWritten map[string][]v1.LoadBalancerIngress
	overwrites  map[string]*overwriteEpisode
}

func newAllocations(apis ...string) *allocations {
	if len(apis) == 0 {
		apis = []string{PoolAPIKCMSplit}
	}
	return &allocations{
		apis:        apis,
		alloc:       addrpool.New(),
		pools:       map[string]*poolInfo{},
		pending:     map[string]bool{},
		waitingAs:   map[string]pendingLabels{},
		badInput:    map[string]string{},
		origin:      map[netip.Addr]string{},
		unverified:  map[string]map[netip.Addr]string{},
		lastWritten: map[string][]v1.LoadBalancerIngress{},
		overwrites:  map[string]*overwriteEpisode{},
	}
}

// ---- What the Controller does after a decision ----

// effects is what the Controller must do after a decision, outside the lock: sync the
// Services and refresh the pool statuses named, and show the gauges.
type effects struct {
	requeue []string // Services to sync again
	pools   []string // pools whose status to refresh
	gauges  gauges
}

// gaugeLevel says which gauges a decision changed.
type gaugeLevel int

const (
	gaugesNone    gaugeLevel = iota
	gaugesPending            // only the number of waiting Services
	gaugesAll
)

// gauges are the state's numbers right after one decision. seq orders them: decisions are
// published after the lock is released, so two may be published out of order, and the older
// must not overwrite the newer.
type gauges struct {
	seq   uint64
	level gaugeLevel
	totals
}

// The helpers below expect mu held; they record in e what a change implies.

// retryWaiting asks for every Service waiting for an address to be synced again: one has
// just freed up, or pools changed.
func (s *allocations) retryWaiting(e *effects) {
	e.requeue = append(e.requeue, s.waiting()...)
	e.gauges.level = max(e.gauges.level, gaugesPending)
}

// stopWaitingFor takes key off the waiting list.
func (s *allocations) stopWaitingFor(key string, e *effects) {
	if s.stopWaiting(key) {
		e.gauges.level = max(e.gauges.level, gaugesPending)
	}
}

// allocationChanged asks for every pool's status to be refreshed and the gauges shown.
func (s *allocations) allocationChanged(e *effects) {
	e.pools = s.poolNames()
	e.gauges.level = gaugesAll
}

// seal takes the gauge snapshot e asks for, as the last step of a decision.
func (s *allocations) seal(e *effects) effects {
	switch e.gauges.level {
	case gaugesPending:
		// Only the count: summing the pools' usage costs a pass over every address.
		s.seq++
		e.gauges.seq = s.seq
		e.gauges.pending = s.pendingByLabels()
	case gaugesAll:
		s.seq++
		e.gauges.seq = s.seq
		e.gauges.totals = s.totals()
	}
	return *e
}

// ---- Decisions: each takes mu once ----

// restoredService is a Service whose status addresses restore takes as held.
type restoredService struct {
	key   string
	props addrpool.Props
	addrs []netip.Addr
}

// restoredClaim is one address claim as restore needs it; props are its Service's when the
// cache has it, and skip says that Service no longer wants an address from us.
type restoredClaim struct {
	addr   netip.Addr
	pool   string // the pool it came from, if recorded
	parent string // the Service it names, or ""
	props  addrpool.Props
	skip   bool
}

// restoreResult counts what restore took and from where.
type restoreResult struct {
	fromStatus, fromClaims int
	effects
}

// restore rebuilds who holds which address: first the Services' status (svcs in the order
// that wins a conflict), then the claims of addresses nobody shows yet, which stay reserved
// for the Service they name (queued so it shows them). notKept is told of a status address
// that cannot be kept.
func (s *allocations) restore(svcs []restoredService, claims []restoredClaim, notKept func(key string, a netip.Addr, err error)) restoreResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r restoreResult
	for _, svc := range svcs {
		for _, a := range svc.addrs {
			if err := s.alloc.Claim(svc.key, a, svc.props); err != nil {
				notKept(svc.key, a, err)
				continue
			}
			r.fromStatus++
		}
	}
	for _, cl := range claims {
		if cl.pool != "" {
			s.origin[cl.addr] = cl.pool
		}
		if cl.parent == "" || len(s.alloc.Holders(cl.addr)) > 0 || cl.skip {
			continue // skip: the sweep deletes it
		}
		if s.alloc.Claim(cl.parent, cl.addr, cl.props) == nil {
			r.fromClaims++
			r.requeue = append(r.requeue, cl.parent)
		}
	}
	for _, key := range s.alloc.Keys() {
		for _, a := range s.alloc.Assigned(key) {
			if _, ok := s.origin[a]; !ok {
				if p := s.validPoolContaining(a); p != "" {
					s.origin[a] = p
				}
			}
		}
	}
	s.restored = true
	r.gauges.level = gaugesAll
	r.effects = s.seal(&r.effects)
	return r
}

// setPools replaces the pools (infos, of which pools are the valid ones); restored says
// whether the state was rebuilt yet.
func (s *allocations) setPools(infos map[string]*poolInfo, pools []addrpool.Pool) (restored bool, e effects) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools = infos
	s.alloc.SetPools(pools)
	s.allocationChanged(&e)
	return s.restored, s.seal(&e)
}

// poolStatus returns what is known of pool name (nil: not parsed) and its usage.
func (s *allocations) poolStatus(name string) (*poolInfo, addrpool.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pools[name], s.alloc.Stats(name)
}

// assigned returns the addresses key holds.
func (s *allocations) assigned(key string) []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alloc.Assigned(key)
}

// poolOf returns the pool a was last seen in, or "".
func (s *allocations) poolOf(a netip.Addr) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.origin[a]
}

// unheld returns those of addrs that nobody holds.
func (s *allocations) unheld(addrs []netip.Addr) []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []netip.Addr
	for _, a := range addrs {
		if len(s.alloc.Holders(a)) == 0 {
			out = append(out, a)
		}
	}
	return out
}

// heldByOthers reports whether a Service other than key holds a (an address found claimed
// by another process does not count).
func (s *allocations) heldByOthers(key string, a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.alloc.Holders(a) {
		if h != key && !strings.HasPrefix(h, takenPrefix) {
			return true
		}
	}
	return false
}

// holdsOther reports whether key holds an address of a's family other than a.
func (s *allocations) holdsOther(key string, a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.alloc.Assigned(key) {
		if h != a && addrpool.FamilyOf(h) == addrpool.FamilyOf(a) {
			return true
		}
	}
	return false
}

// beginCleanup stops key waiting for an address and forgets its bad input; it returns the
// addresses it holds, which stay held until release.
func (s *allocations) beginCleanup(key string) (held []netip.Addr, e effects) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held = s.alloc.Assigned(key)
	s.stopWaitingFor(key, &e)
	delete(s.badInput, key)
	return held, s.seal(&e)
}

// release forgets key and its addresses. It returns the addresses it held and those nobody
// holds any more; a release that freed anything retries the Services waiting.
func (s *allocations) release(key string) (held, freed []netip.Addr, e effects) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forgetService(key) {
		e.gauges.level = gaugesPending
	}
	held = s.alloc.Assigned(key)
	if len(held) == 0 {
		e.gauges.level = gaugesAll
		return nil, nil, s.seal(&e)
	}
	freed = s.alloc.Release(key)
	for _, a := range freed {
		s.forgetAddr(a)
	}
	s.allocationChanged(&e)
	// Even an address that stays shared by others may now suit a waiting Service (a port
	// conflict gone), so every release retries them.
	s.retryWaiting(&e)
	return held, freed, s.seal(&e)
}

// rollback gives back what key holds but its status does not show.
func (s *allocations) rollback(key string, shown []netip.Addr) effects {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e effects
	for _, a := range s.alloc.Assigned(key) {
		if !slices.Contains(shown, a) && s.alloc.ReleaseAddr(key, a) {
			s.forgetAddr(a)
		}
	}
	s.allocationChanged(&e)
	return s.seal(&e)
}

// takenElsewhere records that a, chosen for key, is claimed by another Service (with
// sharingKey): key gives it up, and it stays reserved until its claim is deleted, so the
// next choice is another address.
func (s *allocations) takenElsewhere(key string, a netip.Addr, sharingKey string) effects {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e effects
	s.alloc.ReleaseAddr(key, a)
	_ = s.alloc.Claim(takenKey(a), a, addrpool.Props{SharingKey: sharingKey})
	s.allocationChanged(&e)
	return s.seal(&e)
}

// claimDeleted: the claim of a is gone, so an address reserved because another process
// claimed it is free again; parsed is false when the claim's name is no address. The
// Services waiting are retried either way.
func (s *allocations) claimDeleted(a netip.Addr, parsed bool) effects {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e effects
	if parsed && s.alloc.ReleaseAddr(takenKey(a), a) {
		s.forgetAddr(a)
		s.allocationChanged(&e)
	}
	if len(s.pending) > 0 {
		s.retryWaiting(&e)
	}
	return s.seal(&e)
}

// orphanDeleted forgets that key holds a, whose claim the sweep deleted.
func (s *allocations) orphanDeleted(key string, a netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.alloc.ReleaseAddr(key, a)
	s.forgetAddr(a)
}

// waitingRetry asks for the Services waiting for an address to be synced again.
func (s *allocations) waitingRetry() effects {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e effects
	s.retryWaiting(&e)
	return s.seal(&e)
}

// wrote records the ingress this controller has just written for key.
func (s *allocations) wrote(key string, ingress []v1.LoadBalancerIngress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastWritten[key] = slices.Clone(ingress)
}

// ---- Helpers: the methods below expect mu held ----

// forgetAddr drops what is known about an address nobody holds.
func (s *allocations) forgetAddr(a netip.Addr) {
	if len(s.alloc.Holders(a)) == 0 {
		delete(s.origin, a)
	}
}

// forgetService drops the per-Service bookkeeping of key (not its addresses); it reports
// whether key was pending.
func (s *allocations) forgetService(key string) (wasPending bool) {
	wasPending = s.stopWaiting(key)
	delete(s.badInput, key)
	delete(s.unverified, key)
	delete(s.lastWritten, key)
	delete(s.overwrites, key)
	return wasPending
}

// stopWaiting takes key off the waiting list; it reports whether it was on it.
func (s *allocations) stopWaiting(key string) bool {
	if !s.pending[key] {
		return false
	}
	delete(s.pending, key)
	delete(s.waitingAs, key)
	return true
}

// waiting returns the Services waiting for an address.
func (s *allocations) waiting() []string { return slices.Collect(maps.Keys(s.pending)) }

// poolNames returns the names of the pools last parsed.
func (s *allocations) poolNames() []string { return slices.Collect(maps.Keys(s.pools)) }

// validPoolContaining returns the first valid pool (by name) containing a, or "".
func (s *allocations) validPoolContaining(a netip.Addr) string {
	for _, name := range slices.Sorted(maps.Keys(s.pools)) {
		if !s.pools[name].valid {
			continue
		}
		if p, ok := s.alloc.Pool(name); ok && p.Contains(a) {
			return name
		}
	}
	return ""
}

// totals are the numbers the gauges show: usage per valid pool (by key), waiting Services
// by labels, unverified addresses by the pool last vouching for them ("" unknown).
type totals struct {
	pools      map[string]addrpool.Stats
	pending    map[pendingLabels]int
	unverified map[string]int
}

// totals takes the valid pools' usage and counts the waiting Services and unverified
// addresses.
func (s *allocations) totals() totals {
	t := totals{pools: map[string]addrpool.Stats{}, unverified: map[string]int{}}
	for name, pi := range s.pools {
		if pi.valid {
			t.pools[name] = s.alloc.Stats(name)
		}
	}
	t.pending = s.pendingByLabels()
	for _, m := range s.unverified {
		for a := range m {
			t.unverified[s.origin[a]]++
		}
	}
	return t
}

// pendingByLabels counts the waiting Services by their gauge labels.
func (s *allocations) pendingByLabels() map[pendingLabels]int {
	out := map[pendingLabels]int{}
	for key := range s.pending {
		out[s.waitingAs[key]]++
	}
	return out
}

// ---- Overwrite backoff: a decision of its own (it takes mu) ----

// Overwrite backoff: when the status this controller wrote is changed by someone else, it
// is put back at once, then after overwriteBase, doubling, and after overwriteMaxAttempts
// writes only every overwriteSlow. An episode ends after overwriteQuiet without an
// overwrite.
const (
	overwriteBase        = 5 * time.Second
	overwriteMaxAttempts = 5
	overwriteSlow        = 5 * time.Minute
	overwriteQuiet       = 10 * time.Minute
)

// overwriteEpisode is one Service's run of overwrites by another writer.
type overwriteEpisode struct {
	attempts int
	seen     time.Time // last time an overwrite was seen
	next     time.Time // no write before
}

// overwriteBackoff decides whether desired may be written for key at now, when status (the
// Service's current ingress) is not what this controller last wrote although it still wants
// the same: someone else changed it. It returns how long to wait (0: write now), whether a
// new episode began, and whether this is a write against an overwrite (to be counted).
// Reading the episode and moving it on are one step under mu.
func (s *allocations) overwriteBackoff(key string, status, desired []v1.LoadBalancerIngress, now time.Time) (wait time.Duration, newEpisode, rewrite bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, ok := s.lastWritten[key]
	if !ok || !ingressEqual(last, desired) || ingressEqual(status, last) {
		return 0, false, false
	}
	e := s.overwrites[key]
	if e == nil || now.Sub(e.seen) > overwriteQuiet {
		e = &overwriteEpisode{}
		s.overwrites[key] = e
		newEpisode = true
	}
	e.seen = now
	if now.Before(e.next) {
		return e.next.Sub(now), newEpisode, false
	}
	e.attempts++
	delay := overwriteSlow
	if e.attempts < overwriteMaxAttempts {
		delay = overwriteBase << (e.attempts - 1)
	}
	e.next = now.Add(delay)
	return 0, newEpisode, true
}
