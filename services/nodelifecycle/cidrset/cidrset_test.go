package cidrset

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func mustSet(t testing.TB, cluster string, mask int) *Set {
	t.Helper()
	s, err := New(netip.MustParsePrefix(cluster), mask)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func alloc(t testing.TB, s *Set) netip.Prefix {
	t.Helper()
	r, _, err := s.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// nth computes the i-th range of cluster with math/big, independently of the set's own
// arithmetic.
func nth(cluster netip.Prefix, mask, i int) netip.Prefix {
	b := cluster.Addr().AsSlice()
	x := new(big.Int).SetBytes(b)
	x.Or(x, new(big.Int).Lsh(big.NewInt(int64(i)), uint(len(b)*8-mask)))
	out := make([]byte, len(b))
	x.FillBytes(out)
	a, _ := netip.AddrFromSlice(out)
	return netip.PrefixFrom(a, mask)
}

func TestNewRejectsBadSizes(t *testing.T) {
	for _, tc := range []struct {
		cluster string
		mask    int
		want    string
	}{
		{"10.0.0.0/16", 15, "larger than the cluster CIDR"},
		{"10.0.0.0/16", 33, "longer than an IPv4 address"},
		{"2001:db8::/48", 129, "longer than an IPv6 address"},
		{"10.0.0.0/8", 33, "longer"},
		{"10.0.0.0/4", 29, "2^25 ranges"},
		{"2001:db8::/32", 64, "2^32 ranges"},
		{"::ffff:10.0.0.0/104", 120, "IPv4-mapped"},
	} {
		_, err := New(netip.MustParsePrefix(tc.cluster), tc.mask)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s, %d) = %v, want an error with %q", tc.cluster, tc.mask, err, tc.want)
		}
	}
	for _, ok := range []struct {
		cluster string
		mask    int
	}{{"10.0.0.0/8", 32}, {"10.0.0.0/16", 16}, {"2001:db8::/40", 64}, {"10.1.2.3/16", 24}} {
		if _, err := New(netip.MustParsePrefix(ok.cluster), ok.mask); err != nil {
			t.Errorf("New(%s, %d): %v", ok.cluster, ok.mask, err)
		}
	}
}

func TestIPv4HandsOutEveryRangeInOrderThenIsFull(t *testing.T) {
	s := mustSet(t, "10.1.2.3/16", 24) // not canonical: the set masks it
	if s.Cluster().String() != "10.1.0.0/16" || s.Size() != 256 {
		t.Fatalf("cluster %s size %d", s.Cluster(), s.Size())
	}
	for i := 0; i < 256; i++ {
		r, tries, err := s.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("10.1.%d.0/24", i); r.String() != want || tries != 0 {
			t.Fatalf("allocation %d = %s (tries %d), want %s", i, r, tries, want)
		}
	}
	if _, _, err := s.Allocate(); !errors.Is(err, ErrFull) {
		t.Fatalf("257th allocation: %v, want ErrFull", err)
	}
	if s.Used() != 256 {
		t.Fatalf("used %d", s.Used())
	}
}

func TestIPv6RangesAcrossTheHalfBoundary(t *testing.T) {
	// A /60 cut into /68s: the range number straddles bit 64 of the address.
	for _, tc := range []struct {
		cluster string
		mask    int
	}{{"2001:db8::/60", 68}, {"2001:db8:1::/48", 64}, {"2001:db8::/104", 120}, {"2001:db8:0:ff00::/56", 72}} {
		cluster := netip.MustParsePrefix(tc.cluster)
		s := mustSet(t, tc.cluster, tc.mask)
		seen := map[netip.Prefix]bool{}
		for i := 0; i < 300 && i < s.Size(); i++ {
			r := alloc(t, s)
			if want := nth(cluster, tc.mask, i); r != want {
				t.Fatalf("%s: allocation %d = %s, want %s", tc.cluster, i, r, want)
			}
			if !cluster.Contains(r.Addr()) || seen[r] {
				t.Fatalf("%s: %s outside or repeated", tc.cluster, r)
			}
			seen[r] = true
		}
	}
}

func TestDualStackSetsAreIndependent(t *testing.T) {
	v4, v6 := mustSet(t, "10.0.0.0/30", 31), mustSet(t, "2001:db8::/64", 65)
	a4, a6 := alloc(t, v4), alloc(t, v6)
	if a4.String() != "10.0.0.0/31" || a6.String() != "2001:db8::/65" {
		t.Fatalf("got %s and %s", a4, a6)
	}
	// A range of the other family marks nothing and is never contained.
	if taken, shared := v4.Occupy(a6); taken+shared != 0 || v4.Contains(a6) || v6.Contains(a4) || v4.Held(a6) {
		t.Fatalf("cross-family occupy/contains")
	}
	if v4.Release(a6) != 0 || v4.Used() != 1 {
		t.Fatal("cross-family release touched the IPv4 set")
	}
}

func TestExhaustionReleaseThenReuse(t *testing.T) {
	s := mustSet(t, "192.0.2.0/30", 31)
	a, b := alloc(t, s), alloc(t, s)
	if a == b {
		t.Fatal("same range twice")
	}
	if _, _, err := s.Allocate(); !errors.Is(err, ErrFull) {
		t.Fatalf("third: %v", err)
	}
	if freed := s.Release(a); freed != 1 {
		t.Fatalf("freed %d", freed)
	}
	if r, _, err := s.Allocate(); r != a || err != nil {
		t.Fatalf("after release got %s, %v, want %s", r, err, a)
	}
}

func TestTriesCountsTakenRangesPassedOver(t *testing.T) {
	s := mustSet(t, "192.0.2.0/24", 26)
	alloc(t, s)
	s.Occupy(netip.MustParsePrefix("192.0.2.64/26")) // a preset range where the search starts
	s.Occupy(netip.MustParsePrefix("192.0.2.128/26"))
	if r, tries, _ := s.Allocate(); r.String() != "192.0.2.192/26" || tries != 2 {
		t.Fatalf("got %s after passing over %d, want 192.0.2.192/26 after 2", r, tries)
	}
}

func TestReleasedRangeIsHandedOutLast(t *testing.T) {
	s := mustSet(t, "10.0.0.0/24", 26) // 4 ranges
	a := alloc(t, s)
	s.Release(a)
	if r := alloc(t, s); r == a {
		t.Fatalf("%s reused while others were free", a)
	}
}

func TestOccupancyRebuild(t *testing.T) {
	// A set is rebuilt from what Nodes hold (a restart): nothing they hold is handed out.
	first := mustSet(t, "10.0.0.0/24", 28)
	var held []netip.Prefix
	for i := 0; i < 16; i++ {
		r := alloc(t, first)
		if i%3 != 0 {
			held = append(held, r)
		}
	}
	rebuilt := mustSet(t, "10.0.0.0/24", 28)
	for _, r := range held {
		if taken, shared := rebuilt.Occupy(r); taken != 1 || shared != 0 {
			t.Fatalf("occupy %s: taken %d shared %d", r, taken, shared)
		}
	}
	for i := 0; i < 16-len(held); i++ {
		r := alloc(t, rebuilt)
		for _, h := range held {
			if r.Overlaps(h) {
				t.Fatalf("handed out %s, held by a Node", r)
			}
		}
	}
	if _, _, err := rebuilt.Allocate(); !errors.Is(err, ErrFull) {
		t.Fatalf("want full, got %v", err)
	}
}

func TestOccupyOddSizes(t *testing.T) {
	s := mustSet(t, "10.0.0.0/16", 24)
	// Wider than a range: 4 ranges. Narrower: the range holding it. Partly outside: the
	// overlap. Wholly outside: nothing.
	for _, tc := range []struct {
		r             string
		taken, shared int
		contains      bool
	}{
		{"10.0.4.0/22", 4, 0, true},
		{"10.0.5.128/25", 0, 1, true},
		{"10.0.9.0/25", 1, 0, true},
		{"10.0.0.0/8", 256 - 5, 5, false},
		{"10.1.0.0/24", 0, 0, false},
	} {
		taken, shared := s.Occupy(netip.MustParsePrefix(tc.r))
		if taken != tc.taken || shared != tc.shared || s.Contains(netip.MustParsePrefix(tc.r)) != tc.contains {
			t.Errorf("occupy %s: taken %d shared %d contains %v, want %d %d %v", tc.r, taken, shared,
				s.Contains(netip.MustParsePrefix(tc.r)), tc.taken, tc.shared, tc.contains)
		}
	}
	// Dropping the /8 leaves what the others hold.
	if freed := s.Release(netip.MustParsePrefix("10.0.0.0/8")); freed != 251 || s.Used() != 5 {
		t.Fatalf("freed %d, used %d", freed, s.Used())
	}
}

func TestSharedRangeNeedsEveryHolderToRelease(t *testing.T) {
	s := mustSet(t, "10.0.0.0/16", 24)
	r := netip.MustParsePrefix("10.0.7.0/24")
	s.Occupy(r)
	if _, shared := s.Occupy(r); shared != 1 {
		t.Fatal("second holder not counted as shared")
	}
	if !s.Shared(r) || !s.Shared(netip.MustParsePrefix("10.0.0.0/16")) || s.Shared(netip.MustParsePrefix("10.0.8.0/24")) {
		t.Fatal("Shared does not see the second holder of 10.0.7.0/24 alone")
	}
	if s.Release(r) != 0 || !s.Held(r) || s.Shared(r) {
		t.Fatal("one release of two freed the range, or left it shared")
	}
	if s.Release(r) != 1 || s.Held(r) || s.Used() != 0 {
		t.Fatal("second release did not free it")
	}
	if s.Release(r) != 0 || s.Used() != 0 {
		t.Fatal("a release of a free range changed the count")
	}
}

// model is what a set should hold: every live holding, by holder.
type model struct {
	cluster netip.Prefix
	mask    int
	holds   []netip.Prefix // one entry per hold; the service range is one of them
}

// usedSlots counts, by brute force over every range, the ranges any holding overlaps.
func (m *model) usedSlots() int {
	n := 1 << (m.mask - m.cluster.Bits())
	used := 0
	for i := 0; i < n; i++ {
		r := nth(m.cluster, m.mask, i)
		for _, h := range m.holds {
			if h.Overlaps(r) {
				used++
				break
			}
		}
	}
	return used
}

// TestProperties runs random operation sequences on random sets (IPv4 and IPv6, with a
// Service range inside, around or beside the cluster CIDR, and preset Node ranges of odd
// sizes) and checks after every step: a new range is inside the cluster CIDR, overlaps no
// live holding and not the Service range; the used count equals a brute-force count; once
// full, a release makes exactly that range available again; a set rebuilt from the live
// holdings agrees.
// Over 80 lines: the model, the operations and the checks share the state of one run.
func TestProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var cluster netip.Prefix
		if rng.IntN(2) == 0 {
			cluster = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(rng.IntN(256)), 0, 0}), 16+rng.IntN(10)).Masked()
		} else {
			cluster = netip.PrefixFrom(netip.MustParseAddr(fmt.Sprintf("2001:db8:%x::", rng.IntN(1<<16))), 48+rng.IntN(70)).Masked()
		}
		mask := cluster.Bits() + rng.IntN(7) // up to 64 ranges: the model is brute force
		if mask > cluster.Addr().BitLen() {
			mask = cluster.Addr().BitLen()
		}
		s, err := New(cluster, mask)
		if err != nil {
			t.Fatal(err)
		}
		m := &model{cluster: cluster, mask: mask}
		// A Service range: some random prefix near the cluster CIDR, occupied first.
		service := randomNear(rng, cluster)
		s.Occupy(service)
		m.holds = append(m.holds, service)
		var allocated []netip.Prefix
		for step := 0; step < 150; step++ {
			switch op := rng.IntN(10); {
			case op < 5: // allocate
				r, _, err := s.Allocate()
				if errors.Is(err, ErrFull) {
					if m.usedSlots() != s.Size() {
						t.Fatalf("round %d: full at %d of %d used", round, m.usedSlots(), s.Size())
					}
					if len(allocated) > 0 {
						// release then reuse: the one released range comes back.
						k := rng.IntN(len(allocated))
						back := allocated[k]
						if s.Release(back) == 1 {
							if again, _, err := s.Allocate(); err != nil || again != back {
								t.Fatalf("round %d: released %s, got %s, %v", round, back, again, err)
							}
						} else {
							// Still held by a preset holding; put the hold back.
							s.Occupy(back)
						}
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if !s.Contains(r) || r.Bits() != mask {
					t.Fatalf("round %d: %s outside %s or not /%d", round, r, cluster, mask)
				}
				for _, h := range m.holds {
					if h.Overlaps(r) {
						t.Fatalf("round %d: handed out %s overlapping the live holding %s (service %s)", round, r, h, service)
					}
				}
				m.holds = append(m.holds, r)
				allocated = append(allocated, r)
			case op < 7 && len(m.holds) > 1: // release some holding other than the service range
				k := 1 + rng.IntN(len(m.holds)-1)
				s.Release(m.holds[k])
				if i := indexOf(allocated, m.holds[k]); i >= 0 {
					allocated = append(allocated[:i], allocated[i+1:]...)
				}
				m.holds = append(m.holds[:k], m.holds[k+1:]...)
			case op < 9: // a Node created with a preset range
				r := randomNear(rng, cluster)
				s.Occupy(r)
				m.holds = append(m.holds, r)
			default: // a restart: rebuild from the holdings
				s, _ = New(cluster, mask)
				for _, h := range m.holds {
					s.Occupy(h)
				}
			}
			if got, want := s.Used(), m.usedSlots(); got != want {
				t.Fatalf("round %d step %d: used %d, brute force %d", round, step, got, want)
			}
		}
	}
}

func indexOf(list []netip.Prefix, p netip.Prefix) int {
	for i, q := range list {
		if q == p {
			return i
		}
	}
	return -1
}

// randomNear is a prefix inside, around, partly over or beside cluster.
func randomNear(rng *rand.Rand, cluster netip.Prefix) netip.Prefix {
	width := cluster.Addr().BitLen()
	bitsLen := cluster.Bits() - 2 + rng.IntN(width-cluster.Bits()+3)
	if bitsLen > width {
		bitsLen = width
	}
	b := cluster.Addr().AsSlice()
	// Randomize the bits below the cluster prefix, and sometimes one just above it.
	for i := cluster.Bits() - rng.IntN(2); i < width; i++ {
		if i >= 0 && rng.IntN(2) == 0 {
			b[i/8] ^= 1 << (7 - uint(i)%8)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, bitsLen).Masked()
}

// BenchmarkAllocateNearlyFull measures finding the one free range of 2^16 (the worst case:
// a cluster nearly out of ranges), against a bit-by-bit scan, the way a plain bitmap
// search goes.
func BenchmarkAllocateNearlyFull(b *testing.B) {
	s := mustSet(b, "10.0.0.0/8", 24)
	var all []netip.Prefix
	for {
		r, _, err := s.Allocate()
		if err != nil {
			break
		}
		all = append(all, r)
	}
	b.Run("words", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			r := all[(i*7919)%len(all)]
			s.Release(r)
			if _, _, err := s.Allocate(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bit-by-bit", func(b *testing.B) {
		var used big.Int
		for i := range all {
			used.SetBit(&used, i, 1)
		}
		next := 0
		for i := 0; b.Loop(); i++ {
			k := (i * 7919) % len(all)
			used.SetBit(&used, k, 0)
			c := next
			for j := 0; j < len(all); j++ {
				if used.Bit(c) == 0 {
					break
				}
				c = (c + 1) % len(all)
			}
			used.SetBit(&used, c, 1)
			next = (c + 1) % len(all)
		}
	})
}
