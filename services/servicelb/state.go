// Allocation state: which address belongs to which Service, and the bookkeeping the
// decisions need (pools as last parsed, Services waiting, reasons already reported, the
// status last written). It holds no client and sends nothing; the Controller turns what
// its methods return into queue adds, Events and metrics.

package servicelb

import (
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
)

// allocations is the controller's allocation state. Workers and event handlers share it:
// mu makes every decision over it one at a time; the API writes that follow a decision are
// not made under it.
type allocations struct {
	mu    sync.Mutex
	alloc *addrpool.Allocator
	pools map[string]*poolInfo
	// pending are the Services waiting for an address.
	pending map[string]bool
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

func newAllocations() *allocations {
	return &allocations{
		alloc:       addrpool.New(),
		pools:       map[string]*poolInfo{},
		pending:     map[string]bool{},
		badInput:    map[string]string{},
		origin:      map[netip.Addr]string{},
		unverified:  map[string]map[netip.Addr]string{},
		lastWritten: map[string][]v1.LoadBalancerIngress{},
		overwrites:  map[string]*overwriteEpisode{},
	}
}

// The methods below expect mu held.

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

// totals are the numbers the gauges show.
type totals struct {
	stats      addrpool.Stats
	pending    int
	unverified int
}

// totals sums the valid pools' usage and counts the waiting Services and unverified
// addresses.
func (s *allocations) totals() totals {
	var t totals
	for name, pi := range s.pools {
		if !pi.valid {
			continue
		}
		ps := s.alloc.Stats(name)
		t.stats.AssignedIPv4 += ps.AssignedIPv4
		t.stats.AvailableIPv4 += ps.AvailableIPv4
		t.stats.AssignedIPv6 += ps.AssignedIPv6
		t.stats.AvailableIPv6 = addSat(t.stats.AvailableIPv6, ps.AvailableIPv6)
	}
	t.pending = len(s.pending)
	for _, m := range s.unverified {
		t.unverified += len(m)
	}
	return t
}

func addSat(x, y int64) int64 {
	if x > (1<<63-1)-y {
		return 1<<63 - 1
	}
	return x + y
}

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
func (s *allocations) overwriteBackoff(key string, status, desired []v1.LoadBalancerIngress, now time.Time) (wait time.Duration, newEpisode, rewrite bool) {
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
