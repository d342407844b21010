package addrpool

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
)

// Pool is a named set of address ranges to allocate from.
type Pool struct {
	Name   string
	Ranges []Range
	// AvoidBuggyIPs skips IPv4 addresses ending in .0 and .255.
	AvoidBuggyIPs bool
}

// Contains reports whether a is an address of the pool that may be handed out.
func (p Pool) Contains(a netip.Addr) bool {
	if p.AvoidBuggyIPs && isBuggy(a) {
		return false
	}
	for _, r := range p.Ranges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// Port is one protocol and port a Service exposes.
type Port struct {
	Protocol string
	Port     int32
}

// Props are the properties of a Service that decide whether it may share an address.
type Props struct {
	// SharingKey is the Service's sharing key; Services share only with the same non-empty key.
	SharingKey string
	// Ports the Service exposes; sharing Services may not expose the same protocol and port.
	Ports []Port
	// TrafficPolicy is the externalTrafficPolicy; sharing Services must have the same.
	TrafficPolicy string
	// Backends identifies the Pods behind a Service (its selector). With the Local traffic
	// policy, a node answers for an address only if it runs a backend, so Services sharing
	// an address must have the same backends, or some of them would be unreachable.
	Backends string
}

// LocalTrafficPolicy is the TrafficPolicy value that also requires equal Backends.
const LocalTrafficPolicy = "Local"

// Compatible returns nil when Services with props a and b may share an address, or the
// reason they may not.
func Compatible(a, b Props) error {
	if a.SharingKey == "" || b.SharingKey == "" {
		return errors.New("no sharing key")
	}
	if a.SharingKey != b.SharingKey {
		return fmt.Errorf("sharing keys %q and %q differ", a.SharingKey, b.SharingKey)
	}
	if a.TrafficPolicy != b.TrafficPolicy {
		return fmt.Errorf("externalTrafficPolicy %s and %s differ", a.TrafficPolicy, b.TrafficPolicy)
	}
	if a.TrafficPolicy == LocalTrafficPolicy && a.Backends != b.Backends {
		return errors.New("externalTrafficPolicy Local with different selectors")
	}
	for _, p := range a.Ports {
		for _, q := range b.Ports {
			if p.Port == q.Port && strings.EqualFold(p.Protocol, q.Protocol) {
				return fmt.Errorf("both use port %d/%s", p.Port, p.Protocol)
			}
		}
	}
	return nil
}

// Errors returned by Allocate and Claim; test with errors.Is.
var (
	// ErrExhausted: no eligible pool has a free address of the family.
	ErrExhausted = errors.New("no address available")
	// ErrInUse: the address is held by a Service that may not share it.
	ErrInUse = errors.New("address in use")
)

type holder struct {
	key   string
	props Props
}

// Allocator tracks which Service (by key) holds which address. It is not safe for
// concurrent use; the controller serializes calls.
type Allocator struct {
	pools   map[string]Pool
	holders map[netip.Addr][]holder
	byKey   map[string][]netip.Addr
}

// New returns an empty allocator with no pools.
func New() *Allocator {
	return &Allocator{
		pools:   map[string]Pool{},
		holders: map[netip.Addr][]holder{},
		byKey:   map[string][]netip.Addr{},
	}
}

// SetPools replaces the pools. Addresses already held stay held even when no pool contains
// them any more: the caller finds those with Stale and moves their Services.
func (a *Allocator) SetPools(pools []Pool) {
	a.pools = make(map[string]Pool, len(pools))
	for _, p := range pools {
		p.Ranges = slices.Clone(p.Ranges)
		slices.SortFunc(p.Ranges, func(x, y Range) int { return x.First.Compare(y.First) })
		a.pools[p.Name] = p
	}
}

// Pool returns the pool named name.
func (a *Allocator) Pool(name string) (Pool, bool) {
	p, ok := a.pools[name]
	return p, ok
}

// Assigned returns the addresses key holds, sorted.
func (a *Allocator) Assigned(key string) []netip.Addr {
	return slices.Clone(a.byKey[key])
}

// Holders returns the keys holding addr, sorted.
func (a *Allocator) Holders(addr netip.Addr) []string {
	var out []string
	for _, h := range a.holders[addr] {
		out = append(out, h.key)
	}
	return out
}

// Claim makes key hold addr with props, whether or not a pool contains it (the controller
// checks pools; restoring state from Service status must not lose an address). If key holds
// addr already its props are updated. It fails with ErrInUse when a holder may not share with
// props, and with an error when key already holds another address of addr's family.
func (a *Allocator) Claim(key string, addr netip.Addr, props Props) error {
	for _, h := range a.holders[addr] {
		if h.key == key {
			continue
		}
		if err := Compatible(props, h.props); err != nil {
			return fmt.Errorf("%w: %s holds %s (%v)", ErrInUse, h.key, addr, err)
		}
	}
	for _, held := range a.byKey[key] {
		if held != addr && FamilyOf(held) == FamilyOf(addr) {
			return fmt.Errorf("%s already holds %s address %s", key, FamilyOf(addr), held)
		}
	}
	a.hold(key, addr, props)
	return nil
}

func (a *Allocator) hold(key string, addr netip.Addr, props Props) {
	hs := a.holders[addr]
	i := slices.IndexFunc(hs, func(h holder) bool { return h.key == key })
	if i >= 0 {
		hs[i].props = props
		return
	}
	hs = append(hs, holder{key: key, props: props})
	slices.SortFunc(hs, func(x, y holder) int { return strings.Compare(x.key, y.key) })
	a.holders[addr] = hs
	addrs := append(a.byKey[key], addr)
	slices.SortFunc(addrs, netip.Addr.Compare)
	a.byKey[key] = addrs
}

// Allocate gives key an address of family fam from the first of pools (in order) that has
// one: preferably an address already shared under props.SharingKey with compatible
// Services, else a free one. If key holds an address of fam in one of pools already, that is
// returned. Unknown pool names are skipped. It fails with ErrExhausted.
func (a *Allocator) Allocate(key string, fam Family, pools []string, props Props) (netip.Addr, string, error) {
	for _, held := range a.byKey[key] {
		if FamilyOf(held) != fam {
			continue
		}
		for _, name := range pools {
			if p, ok := a.pools[name]; ok && p.Contains(held) {
				return held, name, a.Claim(key, held, props)
			}
		}
		return netip.Addr{}, "", fmt.Errorf("%s already holds %s address %s outside the eligible pools", key, fam, held)
	}
	for _, name := range pools {
		p, ok := a.pools[name]
		if !ok {
			continue
		}
		if props.SharingKey != "" {
			if addr, ok := a.shareable(p, fam, props); ok {
				a.hold(key, addr, props)
				return addr, name, nil
			}
		}
		if addr, ok := a.free(p, fam); ok {
			a.hold(key, addr, props)
			return addr, name, nil
		}
	}
	return netip.Addr{}, "", fmt.Errorf("%w: no free %s address in pools %v", ErrExhausted, fam, pools)
}

// shareable returns the lowest address of p and fam whose holders are all compatible with
// props.
func (a *Allocator) shareable(p Pool, fam Family, props Props) (netip.Addr, bool) {
	var best netip.Addr
	for addr, hs := range a.holders {
		if FamilyOf(addr) != fam || !p.Contains(addr) || (best.IsValid() && addr.Compare(best) >= 0) {
			continue
		}
		ok := true
		for _, h := range hs {
			if Compatible(props, h.props) != nil {
				ok = false
				break
			}
		}
		if ok {
			best = addr
		}
	}
	return best, best.IsValid()
}

// free returns the lowest address of p and fam nobody holds. The scan skips at most as many
// addresses as are held, so it stays cheap however large the pool.
func (a *Allocator) free(p Pool, fam Family) (netip.Addr, bool) {
	for _, r := range p.Ranges {
		if r.Family() != fam {
			continue
		}
		for addr := r.First; ; addr = addr.Next() {
			if _, used := a.holders[addr]; !used && !(p.AvoidBuggyIPs && isBuggy(addr)) {
				return addr, true
			}
			if addr == r.Last {
				break
			}
		}
	}
	return netip.Addr{}, false
}

// Release drops every address key holds and returns those that no Service holds any more.
func (a *Allocator) Release(key string) []netip.Addr {
	var freed []netip.Addr
	for _, addr := range a.byKey[key] {
		if a.drop(key, addr) {
			freed = append(freed, addr)
		}
	}
	delete(a.byKey, key)
	return freed
}

// ReleaseAddr drops one address of key; it reports whether no Service holds addr any more.
func (a *Allocator) ReleaseAddr(key string, addr netip.Addr) bool {
	addrs := a.byKey[key]
	i := slices.Index(addrs, addr)
	if i < 0 {
		return false
	}
	addrs = slices.Delete(addrs, i, i+1)
	if len(addrs) == 0 {
		delete(a.byKey, key)
	} else {
		a.byKey[key] = addrs
	}
	return a.drop(key, addr)
}

func (a *Allocator) drop(key string, addr netip.Addr) bool {
	hs := slices.DeleteFunc(a.holders[addr], func(h holder) bool { return h.key == key })
	if len(hs) == 0 {
		delete(a.holders, addr)
		return true
	}
	a.holders[addr] = hs
	return false
}

// Keys returns every key holding an address, sorted.
func (a *Allocator) Keys() []string {
	out := make([]string, 0, len(a.byKey))
	for k := range a.byKey {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Stats are a pool's address counts per family.
type Stats struct {
	AssignedIPv4, AvailableIPv4 int64
	AssignedIPv6, AvailableIPv6 int64
}

// Stats counts the pool's addresses in use (a shared address counts once) and free ones.
// Unknown pools have zero counts.
func (a *Allocator) Stats(name string) Stats {
	p, ok := a.pools[name]
	if !ok {
		return Stats{}
	}
	var s Stats
	for _, r := range p.Ranges {
		n := r.size(p.AvoidBuggyIPs)
		if r.Family() == IPv4 {
			s.AvailableIPv4 = saturatingAdd(s.AvailableIPv4, n)
		} else {
			s.AvailableIPv6 = saturatingAdd(s.AvailableIPv6, n)
		}
	}
	for addr := range a.holders {
		if !p.Contains(addr) {
			continue
		}
		if addr.Is4() {
			s.AssignedIPv4++
		} else {
			s.AssignedIPv6++
		}
	}
	s.AvailableIPv4 -= s.AssignedIPv4
	if s.AvailableIPv6 != math.MaxInt64 { // a saturated count stays saturated
		s.AvailableIPv6 -= s.AssignedIPv6
	}
	return s
}

func saturatingAdd(x, y int64) int64 {
	if x > math.MaxInt64-y {
		return math.MaxInt64
	}
	return x + y
}

// Overlaps checks pools (in order of precedence, oldest first) for shared addresses. It
// returns, for every pool that overlaps an earlier one, the name of the earlier pool; the
// earlier pool keeps its addresses and the later one should not be used.
func Overlaps(pools []Pool) map[string]string {
	out := map[string]string{}
	var kept []Pool
	for _, p := range pools {
		clash := ""
		for _, k := range kept {
			if poolsOverlap(p, k) {
				clash = k.Name
				break
			}
		}
		if clash != "" {
			out[p.Name] = clash
			continue
		}
		kept = append(kept, p)
	}
	return out
}

func poolsOverlap(p, q Pool) bool {
	for _, r := range p.Ranges {
		for _, s := range q.Ranges {
			if r.Overlaps(s) {
				return true
			}
		}
	}
	return false
}

// RangesOverlap returns the first pair of ranges in rs that share an address, if any.
func RangesOverlap(rs []Range) (Range, Range, bool) {
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			if rs[i].Overlaps(rs[j]) {
				return rs[i], rs[j], true
			}
		}
	}
	return Range{}, Range{}, false
}
