// Package cidrset hands out equal-sized ranges (node Pod CIDRs) of one cluster CIDR. It is a
// bitmap with one bit per range, plus a count of extra holders for the rare range claimed by
// more than one party (two Nodes created with the same preset range, a Node range inside the
// Service range), so that releasing one holder never frees a range another still uses.
//
// The package knows nothing of Nodes, clients or metrics: callers observe the counts it
// returns. It is safe for concurrent use.
package cidrset

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"sync"
)

// MaxRangeBits bounds how many ranges one set holds: 2^24 (a /8 cut into /32s, a /40 into
// /64s), a bitmap of 2 MiB. Upstream allows 2^16 for IPv6 and no bound for IPv4.
const MaxRangeBits = 24

// ErrFull is returned by Allocate when every range is taken.
var ErrFull = errors.New("no free range left")

// Set is the allocation state of one cluster CIDR.
type Set struct {
	cluster  netip.Prefix
	maskSize int
	shift    uint // address bits below a range's prefix
	n        int  // number of ranges

	mu    sync.Mutex
	words []uint64
	used  int
	next  int         // where the next search starts: ranges are handed out round-robin
	extra map[int]int // holders beyond the first, by range index
}

// New returns an empty set of the ranges of size maskSize in cluster.
func New(cluster netip.Prefix, maskSize int) (*Set, error) {
	if !cluster.IsValid() {
		return nil, fmt.Errorf("invalid cluster CIDR %v", cluster)
	}
	if cluster.Addr().Is4In6() {
		return nil, fmt.Errorf("cluster CIDR %s is an IPv4-mapped IPv6 range; give it as IPv4", cluster)
	}
	cluster = cluster.Masked()
	width := cluster.Addr().BitLen()
	switch {
	case maskSize < cluster.Bits():
		return nil, fmt.Errorf("node mask size /%d is larger than the cluster CIDR %s", maskSize, cluster)
	case maskSize > width:
		return nil, fmt.Errorf("node mask size /%d is longer than an %s address (%d bits)", maskSize, family(cluster), width)
	case maskSize-cluster.Bits() > MaxRangeBits:
		return nil, fmt.Errorf("node mask size /%d cuts %s into 2^%d ranges; at most 2^%d (a mask of /%d or less)",
			maskSize, cluster, maskSize-cluster.Bits(), MaxRangeBits, cluster.Bits()+MaxRangeBits)
	}
	n := 1 << (maskSize - cluster.Bits())
	return &Set{
		cluster:  cluster,
		maskSize: maskSize,
		shift:    uint(width - maskSize),
		n:        n,
		words:    make([]uint64, (n+63)/64),
		extra:    map[int]int{},
	}, nil
}

// Cluster is the cluster CIDR the set cuts.
func (s *Set) Cluster() netip.Prefix { return s.cluster }

// MaskSize is the prefix length of every range handed out.
func (s *Set) MaskSize() int { return s.maskSize }

// Size is the number of ranges.
func (s *Set) Size() int { return s.n }

// Used is the number of ranges with at least one holder.
func (s *Set) Used() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// Allocate takes a free range. Ranges are handed out round-robin, searching from just after
// the last one taken, so a range just released is handed out again only once the search has
// come round to it (routes and firewall rules of a deleted Node have time to go); a new Set
// searches from the first range. tries is how many taken ranges were passed over.
func (s *Set) Allocate() (r netip.Prefix, tries int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used == s.n {
		return netip.Prefix{}, 0, ErrFull
	}
	i := s.nextFree(s.next)
	if i < 0 {
		i = s.nextFree(0)
	}
	tries = i - s.next
	if tries < 0 {
		tries += s.n
	}
	s.set(i)
	s.used++
	s.next = (i + 1) % s.n
	return s.rangeAt(i), tries, nil
}

// nextFree is the first free index at or after from, or -1.
func (s *Set) nextFree(from int) int {
	for w := from / 64; w < len(s.words); w++ {
		free := ^s.words[w]
		if w == from/64 {
			free &^= 1<<(uint(from)%64) - 1 // ignore the bits before from
		}
		if free != 0 {
			if i := w*64 + bits.TrailingZeros64(free); i < s.n {
				return i
			}
			return -1
		}
	}
	return -1
}

// Occupy marks every range overlapping r as held, once more if it is held already: a Node's
// existing range, or the Service range. Ranges partly outside the cluster CIDR are marked
// where they overlap it; a range of another family or wholly outside marks nothing. taken is
// how many ranges went from free to held, shared how many were held already.
func (s *Set) Occupy(r netip.Prefix) (taken, shared int) {
	first, last, ok := s.overlap(r)
	if !ok {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := first; i <= last; i++ {
		if s.isSet(i) {
			s.extra[i]++
			shared++
			continue
		}
		s.set(i)
		s.used++
		taken++
	}
	return taken, shared
}

// Release drops one hold of every range overlapping r: what Allocate returned or what was
// given to Occupy, by the same holder. freed is how many ranges became free (a range held
// twice needs two releases).
func (s *Set) Release(r netip.Prefix) (freed int) {
	first, last, ok := s.overlap(r)
	if !ok {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := first; i <= last; i++ {
		if !s.isSet(i) {
			continue
		}
		if k := s.extra[i]; k > 0 {
			if k == 1 {
				delete(s.extra, i)
			} else {
				s.extra[i] = k - 1
			}
			continue
		}
		s.clear(i)
		s.used--
		freed++
	}
	return freed
}

// Held reports whether any range overlapping r is held.
func (s *Set) Held(r netip.Prefix) bool { return s.anyOverlapping(r, s.isSet) }

// Shared reports whether any range overlapping r has more than one holder.
func (s *Set) Shared(r netip.Prefix) bool {
	return s.anyOverlapping(r, func(i int) bool { return s.extra[i] > 0 })
}

// anyOverlapping reports whether test holds for any range overlapping r; test runs under mu.
func (s *Set) anyOverlapping(r netip.Prefix, test func(i int) bool) bool {
	first, last, ok := s.overlap(r)
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := first; i <= last; i++ {
		if test(i) {
			return true
		}
	}
	return false
}

// Contains reports whether r lies wholly inside the cluster CIDR.
func (s *Set) Contains(r netip.Prefix) bool {
	r = r.Masked()
	return r.IsValid() && r.Addr().BitLen() == s.cluster.Addr().BitLen() &&
		r.Bits() >= s.cluster.Bits() && s.cluster.Contains(r.Addr())
}

// overlap is the index range of the ranges r overlaps.
func (s *Set) overlap(r netip.Prefix) (first, last int, ok bool) {
	r = r.Masked()
	if !r.IsValid() || r.Addr().BitLen() != s.cluster.Addr().BitLen() {
		return 0, 0, false
	}
	if r.Bits() <= s.cluster.Bits() { // r is the cluster CIDR or wider
		if !r.Contains(s.cluster.Addr()) {
			return 0, 0, false
		}
		return 0, s.n - 1, true
	}
	if !s.cluster.Contains(r.Addr()) {
		return 0, 0, false
	}
	first = s.index(r.Addr())
	if r.Bits() >= s.maskSize { // inside one range
		return first, first, true
	}
	return first, first + 1<<(s.maskSize-r.Bits()) - 1, true
}

// index is the number of the range holding addr, which lies in the cluster CIDR.
func (s *Set) index(addr netip.Addr) int {
	off := toU128(addr).xor(toU128(s.cluster.Addr()))
	return int(off.rsh(s.shift).lo)
}

// rangeAt is the i-th range.
func (s *Set) rangeAt(i int) netip.Prefix {
	base := toU128(s.cluster.Addr())
	addr := base.or(u128{lo: uint64(i)}.lsh(s.shift)).addr(s.cluster.Addr().Is4())
	return netip.PrefixFrom(addr, s.maskSize)
}

func (s *Set) isSet(i int) bool { return s.words[i/64]&(1<<(uint(i)%64)) != 0 }
func (s *Set) set(i int)        { s.words[i/64] |= 1 << (uint(i) % 64) }
func (s *Set) clear(i int)      { s.words[i/64] &^= 1 << (uint(i) % 64) }

func family(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// u128 is an address as a 128-bit number (IPv4 in the low 32 bits).
type u128 struct{ hi, lo uint64 }

func toU128(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])}
	}
	b := a.As16()
	var x u128
	for i := 0; i < 8; i++ {
		x.hi = x.hi<<8 | uint64(b[i])
		x.lo = x.lo<<8 | uint64(b[8+i])
	}
	return x
}

func (x u128) addr(is4 bool) netip.Addr {
	if is4 {
		v := uint32(x.lo)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[7-i] = byte(x.hi >> (8 * i))
		b[15-i] = byte(x.lo >> (8 * i))
	}
	return netip.AddrFrom16(b)
}

func (x u128) or(y u128) u128  { return u128{x.hi | y.hi, x.lo | y.lo} }
func (x u128) xor(y u128) u128 { return u128{x.hi ^ y.hi, x.lo ^ y.lo} }

func (x u128) rsh(n uint) u128 {
	switch {
	case n == 0:
		return x
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{lo: x.hi >> (n - 64)}
	}
	return u128{hi: x.hi >> n, lo: x.lo>>n | x.hi<<(64-n)}
}

func (x u128) lsh(n uint) u128 {
	switch {
	case n == 0:
		return x
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{hi: x.lo << (n - 64)}
	}
	return u128{hi: x.hi<<n | x.lo>>(64-n), lo: x.lo << n}
}
