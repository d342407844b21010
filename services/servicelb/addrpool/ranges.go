// Package addrpool hands out load-balancer addresses from pools. It is pure: no clients, no
// clocks, no goroutines. The controller feeds it the pools and the addresses Services already
// hold, and asks it for addresses; the allocator guarantees that no address is ever held by
// two Services that may not share it.
package addrpool

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"strings"
)

// Family is an IP family.
type Family int

// The two families. Values follow core/v1's order of preference only by convention.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// FamilyOf returns the family of a (IPv4-mapped IPv6 addresses are unmapped by ParseRange
// and ParseAddr, so they never reach here).
func FamilyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// Range is an inclusive range of addresses of one family.
type Range struct {
	First, Last netip.Addr
}

// Family is the range's family.
func (r Range) Family() Family { return FamilyOf(r.First) }

// Contains reports whether a lies in r.
func (r Range) Contains(a netip.Addr) bool {
	return a.BitLen() == r.First.BitLen() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Overlaps reports whether r and o share an address.
func (r Range) Overlaps(o Range) bool {
	if r.First.BitLen() != o.First.BitLen() {
		return false
	}
	return r.First.Compare(o.Last) <= 0 && o.First.Compare(r.Last) <= 0
}

func (r Range) String() string {
	if r.First == r.Last {
		return r.First.String()
	}
	return r.First.String() + "-" + r.Last.String()
}

// ParseRange parses "a.b.c.d/n" (a CIDR; host bits are masked off), "first-last" (inclusive,
// same family, first <= last) or a single address.
func ParseRange(s string) (Range, error) {
	s = strings.TrimSpace(s)
	if first, last, ok := strings.Cut(s, "-"); ok {
		f, err := ParseAddr(strings.TrimSpace(first))
		if err != nil {
			return Range{}, fmt.Errorf("range %q: %w", s, err)
		}
		l, err := ParseAddr(strings.TrimSpace(last))
		if err != nil {
			return Range{}, fmt.Errorf("range %q: %w", s, err)
		}
		if f.BitLen() != l.BitLen() {
			return Range{}, fmt.Errorf("range %q: ends are of different IP families", s)
		}
		if f.Compare(l) > 0 {
			return Range{}, fmt.Errorf("range %q: first address is after the last", s)
		}
		return Range{First: f, Last: l}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return Range{}, fmt.Errorf("CIDR %q: %w", s, err)
		}
		if p.Addr().Is4In6() {
			return Range{}, fmt.Errorf("CIDR %q: IPv4-mapped IPv6 addresses are not allowed", s)
		}
		if p.Addr().Zone() != "" {
			return Range{}, fmt.Errorf("CIDR %q: zones are not allowed", s)
		}
		p = p.Masked()
		return Range{First: p.Addr(), Last: lastOf(p)}, nil
	}
	a, err := ParseAddr(s)
	if err != nil {
		return Range{}, err
	}
	return Range{First: a, Last: a}, nil
}

// ParseAddr parses one IP address; zones and IPv4-mapped IPv6 forms are rejected, as the
// API server rejects them in Service status.
func ParseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Zone() != "" || a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q: zones and IPv4-mapped IPv6 addresses are not allowed", s)
	}
	return a, nil
}

func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// isBuggy reports whether a is an IPv4 address ending in .0 or .255, which some old client
// stacks treat as network or broadcast addresses whatever the prefix length.
func isBuggy(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	last := a.As4()[3]
	return last == 0 || last == 255
}

// size returns the number of addresses in r, excluding buggy ones when avoidBuggy is set,
// saturated at math.MaxInt64 (an IPv6 /64 holds more than that).
func (r Range) size(avoidBuggy bool) int64 {
	f := new(big.Int).SetBytes(r.First.AsSlice())
	l := new(big.Int).SetBytes(r.Last.AsSlice())
	n := new(big.Int).Sub(l, f)
	n.Add(n, big.NewInt(1))
	if avoidBuggy && r.First.Is4() {
		// Count x in [f, l] with x mod 256 in {0, 255}.
		lo, hi := f.Int64(), l.Int64()
		n.Sub(n, big.NewInt(countMod(lo, hi, 0)+countMod(lo, hi, 255)))
	}
	if !n.IsInt64() {
		return math.MaxInt64
	}
	return n.Int64()
}

// countMod counts x in [lo, hi] (lo >= 0) with x % 256 == rem.
func countMod(lo, hi, rem int64) int64 {
	upTo := func(x int64) int64 { // count in [0, x]
		if x < rem {
			return 0
		}
		return (x-rem)/256 + 1
	}
	if lo == 0 {
		return upTo(hi)
	}
	return upTo(hi) - upTo(lo-1)
}
