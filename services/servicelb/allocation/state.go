// Package allocation is service-lb's allocation state: which address belongs to which
// Service, and the bookkeeping the decisions need (pools as last parsed, Services waiting,
// reasons already reported, the status last written). It holds no client and sends nothing;
// the controller turns what its methods return (Effects, Assignment) into queue adds,
// Events, metrics and API writes.
//
// Its lock is its own: every exported method takes it for exactly one decision (read the
// state, decide, change it) and returns what follows from it, so the controller never holds
// it and never sees the maps.
package allocation

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
)

// State is the allocation state. Workers and event handlers share it: mu makes every
// decision over it one at a time; the API writes that follow a decision are not made under
// it.
type State struct {
	mu sync.Mutex
	// seq numbers the gauge snapshots (see Gauges).
	seq   uint64
	alloc *addrpool.Allocator
	pools map[string]*poolsource.Pool
	// apis are the pool APIs read, in --pool-api's order; it decides which annotations
	// count and the order of candidate pools. Set at construction.
	apis []poolsource.API
	// pending are the Services waiting for an address; waitingAs their gauge labels.
	pending   map[string]bool
	waitingAs map[string]PendingLabels
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
	// lastWritten is the ingress the controller last wrote per Service; overwrites track
	// the Services whose status someone else keeps changing away from it.
	lastWritten map[string][]v1.LoadBalancerIngress
	overwrites  map[string]*overwriteEpisode
	// kept are the overwrite episodes the previous Lease holder kept, taken by
	// ResumeOverwrites and not yet matched against their Service (overwritekeep.go);
	// overwritesChanged is signalled when what is to be kept changes.
	kept              map[string]KeptOverwrite
	overwritesChanged chan struct{}
}

// New is an empty state reading the pool APIs apis, in that order (the project's own when
// none is given).
func New(apis ...poolsource.API) *State {
	if len(apis) == 0 {
		apis = []poolsource.API{poolsource.KCMSplit}
	}
	return &State{
		apis:        apis,
		alloc:       addrpool.New(),
		pools:       map[string]*poolsource.Pool{},
		pending:     map[string]bool{},
		waitingAs:   map[string]PendingLabels{},
		badInput:    map[string]string{},
		origin:      map[netip.Addr]string{},
		unverified:  map[string]map[netip.Addr]string{},
		lastWritten: map[string][]v1.LoadBalancerIngress{},
		overwrites:  map[string]*overwriteEpisode{},
		kept:        map[string]KeptOverwrite{},
		// One pending signal is enough: the keeper reads the whole state.
		overwritesChanged: make(chan struct{}, 1),
	}
}

// APIs returns the names of the pool APIs read, in order.
func (s *State) APIs() []string {
	out := make([]string, len(s.apis))
	for i, a := range s.apis {
		out[i] = a.Name
	}
	return out
}

// ---- Decisions: each takes mu once ----

// RestoredService is a Service whose status addresses Restore takes as held.
type RestoredService struct {
	Key   string
	Props addrpool.Props
	Addrs []netip.Addr
}

// RestoredClaim is one address claim as Restore needs it; Props are its Service's when the
// cache has it, and Skip says that Service no longer wants an address from us.
type RestoredClaim struct {
	Addr   netip.Addr
	Pool   string // the pool it came from, if recorded
	Parent string // the Service it names, or ""
	Props  addrpool.Props
	Skip   bool
}

// Restored counts what Restore took and from where.
type Restored struct {
	FromStatus, FromClaims int
	Effects
}

// Restore rebuilds who holds which address: first the Services' status (svcs in the order
// that wins a conflict), then the claims of addresses nobody shows yet, which stay reserved
// for the Service they name (queued so it shows them). notKept is told of a status address
// that cannot be kept.
func (s *State) Restore(svcs []RestoredService, claims []RestoredClaim, notKept func(key string, a netip.Addr, err error)) Restored {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r Restored
	for _, svc := range svcs {
		for _, a := range svc.Addrs {
			if err := s.alloc.Claim(svc.Key, a, svc.Props); err != nil {
				notKept(svc.Key, a, err)
				continue
			}
			r.FromStatus++
		}
	}
	for _, cl := range claims {
		if cl.Pool != "" {
			s.origin[cl.Addr] = cl.Pool
		}
		if cl.Parent == "" || len(s.alloc.Holders(cl.Addr)) > 0 || cl.Skip {
			continue // skip: the sweep deletes it
		}
		if s.alloc.Claim(cl.Parent, cl.Addr, cl.Props) == nil {
			r.FromClaims++
			r.Requeue = append(r.Requeue, cl.Parent)
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
	r.Gauges.Level = GaugesAll
	r.Effects = s.seal(&r.Effects)
	return r
}

// SetPools replaces the pools (the valid ones hand out addresses); restored says whether
// the state was rebuilt yet.
func (s *State) SetPools(pools map[string]*poolsource.Pool) (restored bool, e Effects) {
	var valid []addrpool.Pool
	for _, p := range pools {
		if p.Valid {
			valid = append(valid, p.Addresses)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools = pools
	s.alloc.SetPools(valid)
	s.allocationChanged(&e)
	return s.restored, s.seal(&e)
}

// PoolStatus returns what is known of pool key (nil: not parsed) and its usage.
func (s *State) PoolStatus(key string) (*poolsource.Pool, addrpool.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pools[key], s.alloc.Stats(key)
}

// Assigned returns the addresses key holds.
func (s *State) Assigned(key string) []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alloc.Assigned(key)
}

// Holders returns who holds a: Service keys, or the marker of an address another process
// claimed.
func (s *State) Holders(a netip.Addr) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alloc.Holders(a)
}

// Holding returns the keys of those holding an address.
func (s *State) Holding() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alloc.Keys()
}

// PoolOf returns the pool a was last seen in, or "".
func (s *State) PoolOf(a netip.Addr) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.origin[a]
}

// Unheld returns those of addrs that nobody holds.
func (s *State) Unheld(addrs []netip.Addr) []netip.Addr {
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

// HeldByOthers reports whether a Service other than key holds a (an address found claimed
// by another process does not count).
func (s *State) HeldByOthers(key string, a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.alloc.Holders(a) {
		if h != key && !strings.HasPrefix(h, takenPrefix) {
			return true
		}
	}
	return false
}

// HoldsOther reports whether key holds an address of a's family other than a.
func (s *State) HoldsOther(key string, a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.alloc.Assigned(key) {
		if h != a && addrpool.FamilyOf(h) == addrpool.FamilyOf(a) {
			return true
		}
	}
	return false
}

// BeginCleanup stops key waiting for an address and forgets its bad input; it returns the
// addresses it holds, which stay held until Release.
func (s *State) BeginCleanup(key string) (held []netip.Addr, e Effects) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held = s.alloc.Assigned(key)
	s.stopWaitingFor(key, &e)
	delete(s.badInput, key)
	return held, s.seal(&e)
}

// Release forgets key and its addresses. It returns the addresses it held and those nobody
// holds any more; a release that freed anything retries the Services waiting.
func (s *State) Release(key string) (held, freed []netip.Addr, e Effects) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forgetService(key) {
		e.Gauges.Level = GaugesPending
	}
	held = s.alloc.Assigned(key)
	if len(held) == 0 {
		e.Gauges.Level = GaugesAll
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

// Rollback gives back what key holds but its status does not show.
func (s *State) Rollback(key string, shown []netip.Addr) Effects {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e Effects
	for _, a := range s.alloc.Assigned(key) {
		if !slices.Contains(shown, a) && s.alloc.ReleaseAddr(key, a) {
			s.forgetAddr(a)
		}
	}
	s.allocationChanged(&e)
	return s.seal(&e)
}

// takenPrefix marks the allocator holder of an address found claimed by a Service this
// process had not seen holding it; a Service name never contains a dot or colon, so
// "claimed/<ip>" is never a Service key.
const takenPrefix = "claimed/"

func takenKey(a netip.Addr) string { return takenPrefix + a.String() }

// TakenElsewhere records that a, chosen for key, is claimed by another Service (with
// sharingKey): key gives it up, and it stays reserved until its claim is deleted, so the
// next choice is another address.
func (s *State) TakenElsewhere(key string, a netip.Addr, sharingKey string) Effects {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e Effects
	s.alloc.ReleaseAddr(key, a)
	_ = s.alloc.Claim(takenKey(a), a, addrpool.Props{SharingKey: sharingKey})
	s.allocationChanged(&e)
	return s.seal(&e)
}

// ClaimDeleted: the claim of a is gone, so an address reserved because another process
// claimed it is free again; parsed is false when the claim's name is no address. The
// Services waiting are retried either way.
func (s *State) ClaimDeleted(a netip.Addr, parsed bool) Effects {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e Effects
	if parsed && s.alloc.ReleaseAddr(takenKey(a), a) {
		s.forgetAddr(a)
		s.allocationChanged(&e)
	}
	if len(s.pending) > 0 {
		s.retryWaiting(&e)
	}
	return s.seal(&e)
}

// OrphanDeleted forgets that key holds a, whose claim the sweep deleted.
func (s *State) OrphanDeleted(key string, a netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.alloc.ReleaseAddr(key, a)
	s.forgetAddr(a)
}

// WaitingRetry asks for the Services waiting for an address to be synced again.
func (s *State) WaitingRetry() Effects {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e Effects
	s.retryWaiting(&e)
	return s.seal(&e)
}

// Wrote records the ingress the controller has just written for key.
func (s *State) Wrote(key string, ingress []v1.LoadBalancerIngress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastWritten[key] = slices.Clone(ingress)
	if _, ok := s.kept[key]; ok {
		delete(s.kept, key) // this term's own write says what was last written
		s.signalOverwrites()
	}
}

// ---- Helpers: the methods below expect mu held ----

// forgetAddr drops what is known about an address nobody holds.
func (s *State) forgetAddr(a netip.Addr) {
	if len(s.alloc.Holders(a)) == 0 {
		delete(s.origin, a)
	}
}

// forgetService drops the per-Service bookkeeping of key (not its addresses); it reports
// whether key was pending.
func (s *State) forgetService(key string) (wasPending bool) {
	wasPending = s.stopWaiting(key)
	delete(s.badInput, key)
	delete(s.unverified, key)
	delete(s.lastWritten, key)
	_, episode := s.overwrites[key]
	_, kept := s.kept[key]
	delete(s.overwrites, key)
	delete(s.kept, key)
	if episode || kept {
		s.signalOverwrites()
	}
	return wasPending
}

// stopWaiting takes key off the waiting list; it reports whether it was on it.
func (s *State) stopWaiting(key string) bool {
	if !s.pending[key] {
		return false
	}
	delete(s.pending, key)
	delete(s.waitingAs, key)
	return true
}

// waiting returns the Services waiting for an address.
func (s *State) waiting() []string { return slices.Collect(maps.Keys(s.pending)) }

// poolNames returns the keys of the pools last parsed.
func (s *State) poolNames() []string { return slices.Collect(maps.Keys(s.pools)) }

// validPoolContaining returns the first valid pool (by key) containing a, or "".
func (s *State) validPoolContaining(a netip.Addr) string {
	for _, name := range slices.Sorted(maps.Keys(s.pools)) {
		if !s.pools[name].Valid {
			continue
		}
		if p, ok := s.alloc.Pool(name); ok && p.Contains(a) {
			return name
		}
	}
	return ""
}
