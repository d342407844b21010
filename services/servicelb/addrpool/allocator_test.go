package addrpool

import (
	"errors"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func mustRange(t testing.TB, s string) Range {
	t.Helper()
	r, err := ParseRange(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func pool(t testing.TB, name string, avoid bool, ranges ...string) Pool {
	t.Helper()
	p := Pool{Name: name, AvoidBuggyIPs: avoid}
	for _, s := range ranges {
		p.Ranges = append(p.Ranges, mustRange(t, s))
	}
	return p
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "192.0.2.0/30", want: "192.0.2.0-192.0.2.3"},
		{in: "192.0.2.5/30", want: "192.0.2.4-192.0.2.7"}, // host bits masked
		{in: "192.0.2.10-192.0.2.20", want: "192.0.2.10-192.0.2.20"},
		{in: " 192.0.2.10 - 192.0.2.20 ", want: "192.0.2.10-192.0.2.20"},
		{in: "192.0.2.7", want: "192.0.2.7"},
		{in: "192.0.2.7/32", want: "192.0.2.7"},
		{in: "2001:db8::/126", want: "2001:db8::-2001:db8::3"},
		{in: "2001:db8::1-2001:db8::ff", want: "2001:db8::1-2001:db8::ff"},
		{in: "192.0.2.20-192.0.2.10", err: "first address is after the last"},
		{in: "192.0.2.1-2001:db8::1", err: "different IP families"},
		{in: "192.0.2.0/33", err: "CIDR"},
		{in: "nonsense", err: "not an IP address"},
		{in: "::ffff:192.0.2.1", err: "IPv4-mapped"},
		{in: "::ffff:192.0.2.0/120", err: "IPv4-mapped"},
	} {
		r, err := ParseRange(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRange(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || r.String() != tc.want {
			t.Errorf("ParseRange(%q) = %v, %v; want %s", tc.in, r, err, tc.want)
		}
	}
}

func TestRangeSize(t *testing.T) {
	for _, tc := range []struct {
		r     string
		avoid bool
		want  int64
	}{
		{"192.0.2.0/24", false, 256},
		{"192.0.2.0/24", true, 254},
		{"192.0.2.0/23", true, 508},
		{"192.0.2.1-192.0.2.254", true, 254},
		{"192.0.2.255-192.0.3.0", true, 0},
		{"192.0.2.255-192.0.3.1", true, 1},
		{"0.0.0.0/0", true, 1<<32 - 2*(1<<24)},
		{"2001:db8::/120", true, 256}, // IPv6 has no buggy addresses
		{"2001:db8::/64", false, math.MaxInt64},
	} {
		if got := mustRange(t, tc.r).size(tc.avoid); got != tc.want {
			t.Errorf("size(%s, avoid=%v) = %d, want %d", tc.r, tc.avoid, got, tc.want)
		}
	}
}

func TestAllocateInOrderAndAvoidBuggy(t *testing.T) {
	a := New()
	a.SetPools([]Pool{pool(t, "p", true, "192.0.2.254-192.0.3.1", "2001:db8::/127")})
	var got []string
	for i := range 3 {
		ip, name, err := a.Allocate(string(rune('a'+i)), IPv4, []string{"p"}, Props{})
		if err != nil {
			if i == 2 && errors.Is(err, ErrExhausted) {
				break
			}
			t.Fatalf("allocate %d: %v", i, err)
		}
		if name != "p" {
			t.Fatalf("pool = %q", name)
		}
		got = append(got, ip.String())
	}
	if strings.Join(got, ",") != "192.0.2.254,192.0.3.1" {
		t.Fatalf("allocated %v, want .254 and .1 (.255 and .0 avoided)", got)
	}
	ip, _, err := a.Allocate("a", IPv6, []string{"p"}, Props{})
	if err != nil || ip != addr("2001:db8::") {
		t.Fatalf("IPv6 = %v, %v", ip, err)
	}
	if got := a.Assigned("a"); len(got) != 2 {
		t.Fatalf("a holds %v, want one per family", got)
	}
}

func TestAllocateIsIdempotentAndPoolOrder(t *testing.T) {
	a := New()
	a.SetPools([]Pool{pool(t, "first", false, "192.0.2.1"), pool(t, "second", false, "198.51.100.0/30")})
	ip1, p1, err := a.Allocate("s1", IPv4, []string{"first", "second"}, Props{})
	if err != nil || ip1 != addr("192.0.2.1") || p1 != "first" {
		t.Fatalf("s1 = %v %v %v", ip1, p1, err)
	}
	again, _, err := a.Allocate("s1", IPv4, []string{"first", "second"}, Props{})
	if err != nil || again != ip1 {
		t.Fatalf("second Allocate for s1 = %v, %v; want the same address", again, err)
	}
	ip2, p2, err := a.Allocate("s2", IPv4, []string{"first", "second"}, Props{})
	if err != nil || ip2 != addr("198.51.100.0") || p2 != "second" {
		t.Fatalf("s2 = %v %v %v; want the second pool once the first is full", ip2, p2, err)
	}
	if _, _, err := a.Allocate("s3", IPv4, []string{"nope"}, Props{}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("unknown pool: err = %v", err)
	}
	if _, _, err := a.Allocate("s1", IPv4, []string{"second"}, Props{}); err == nil {
		t.Fatal("s1 holds an address outside the requested pools: want an error, not a second address")
	}
}

func TestSharingRules(t *testing.T) {
	http := []Port{{"TCP", 80}}
	https := []Port{{"TCP", 443}}
	dns := []Port{{"UDP", 80}}
	for _, tc := range []struct {
		name  string
		a, b  Props
		share bool
	}{
		{"same key, different ports", Props{SharingKey: "k", Ports: http}, Props{SharingKey: "k", Ports: https}, true},
		{"same key, same port", Props{SharingKey: "k", Ports: http}, Props{SharingKey: "k", Ports: http}, false},
		{"same port number, other protocol", Props{SharingKey: "k", Ports: http}, Props{SharingKey: "k", Ports: dns}, true},
		{"different keys", Props{SharingKey: "k", Ports: http}, Props{SharingKey: "j", Ports: https}, false},
		{"no key", Props{Ports: http}, Props{Ports: https}, false},
		{"one key", Props{SharingKey: "k", Ports: http}, Props{Ports: https}, false},
		{"policies differ", Props{SharingKey: "k", Ports: http, TrafficPolicy: "Cluster"}, Props{SharingKey: "k", Ports: https, TrafficPolicy: "Local"}, false},
		{"local, same backends", Props{SharingKey: "k", Ports: http, TrafficPolicy: "Local", Backends: "app=x"}, Props{SharingKey: "k", Ports: https, TrafficPolicy: "Local", Backends: "app=x"}, true},
		{"local, other backends", Props{SharingKey: "k", Ports: http, TrafficPolicy: "Local", Backends: "app=x"}, Props{SharingKey: "k", Ports: https, TrafficPolicy: "Local", Backends: "app=y"}, false},
		{"cluster, other backends", Props{SharingKey: "k", Ports: http, TrafficPolicy: "Cluster", Backends: "app=x"}, Props{SharingKey: "k", Ports: https, TrafficPolicy: "Cluster", Backends: "app=y"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Compatible(tc.a, tc.b) == nil; got != tc.share {
				t.Fatalf("Compatible = %v, want %v", got, tc.share)
			}
			a := New()
			a.SetPools([]Pool{pool(t, "p", false, "192.0.2.0/31")})
			ip1, _, err := a.Allocate("a", IPv4, []string{"p"}, tc.a)
			if err != nil {
				t.Fatal(err)
			}
			err = a.Claim("c", ip1, tc.b)
			if (err == nil) != tc.share || (err != nil && !errors.Is(err, ErrInUse)) {
				t.Fatalf("Claim of a's address with b's props: %v, want shared=%v", err, tc.share)
			}
			a.Release("c")
			ip2, _, err := a.Allocate("b", IPv4, []string{"p"}, tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if (ip1 == ip2) != tc.share {
				t.Fatalf("a=%v b=%v, want shared=%v", ip1, ip2, tc.share)
			}
		})
	}
}

func TestExhaustionAndRelease(t *testing.T) {
	a := New()
	a.SetPools([]Pool{pool(t, "p", false, "192.0.2.0/31")})
	for _, k := range []string{"a", "b"} {
		if _, _, err := a.Allocate(k, IPv4, []string{"p"}, Props{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := a.Allocate("c", IPv4, []string{"p"}, Props{}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("third allocation: %v, want ErrExhausted", err)
	}
	if s := a.Stats("p"); s.AssignedIPv4 != 2 || s.AvailableIPv4 != 0 {
		t.Fatalf("stats = %+v", s)
	}
	freed := a.Release("a")
	if len(freed) != 1 || freed[0] != addr("192.0.2.0") {
		t.Fatalf("freed %v", freed)
	}
	ip, _, err := a.Allocate("c", IPv4, []string{"p"}, Props{})
	if err != nil || ip != addr("192.0.2.0") {
		t.Fatalf("c = %v, %v; want the freed address", ip, err)
	}
	if len(a.Release("nobody")) != 0 {
		t.Fatal("releasing an unknown key freed something")
	}
}

func TestSharedAddressFreedOnlyByLastHolder(t *testing.T) {
	a := New()
	a.SetPools([]Pool{pool(t, "p", false, "192.0.2.1")})
	p1 := Props{SharingKey: "k", Ports: []Port{{"TCP", 80}}}
	p2 := Props{SharingKey: "k", Ports: []Port{{"TCP", 443}}}
	ip, _, _ := a.Allocate("a", IPv4, []string{"p"}, p1)
	if got, _, err := a.Allocate("b", IPv4, []string{"p"}, p2); err != nil || got != ip {
		t.Fatalf("b = %v, %v", got, err)
	}
	if s := a.Stats("p"); s.AssignedIPv4 != 1 || s.AvailableIPv4 != 0 {
		t.Fatalf("a shared address counts once: %+v", s)
	}
	if freed := a.Release("a"); len(freed) != 0 {
		t.Fatalf("release of one sharer freed %v", freed)
	}
	if !slices.Equal(a.Holders(ip), []string{"b"}) {
		t.Fatalf("holders = %v", a.Holders(ip))
	}
	if !a.ReleaseAddr("b", ip) || len(a.Keys()) != 0 {
		t.Fatalf("last holder did not free it; keys %v", a.Keys())
	}
}

func TestClaimRules(t *testing.T) {
	a := New()
	a.SetPools([]Pool{pool(t, "p", false, "192.0.2.0/30")})
	// Claims restore state from Service status, pools or not.
	if err := a.Claim("a", addr("203.0.113.9"), Props{}); err != nil {
		t.Fatalf("claim outside pools: %v", err)
	}
	if err := a.Claim("a", addr("203.0.113.10"), Props{}); err == nil {
		t.Fatal("a second IPv4 address for one key was accepted")
	}
	if err := a.Claim("b", addr("203.0.113.9"), Props{}); !errors.Is(err, ErrInUse) {
		t.Fatalf("double claim: %v", err)
	}
	if err := a.Claim("a", addr("203.0.113.9"), Props{SharingKey: "x"}); err != nil {
		t.Fatalf("re-claim by the holder: %v", err)
	}
	// The free scan skips claimed addresses.
	if err := a.Claim("c", addr("192.0.2.0"), Props{}); err != nil {
		t.Fatal(err)
	}
	if ip, _, _ := a.Allocate("d", IPv4, []string{"p"}, Props{}); ip != addr("192.0.2.1") {
		t.Fatalf("d = %v", ip)
	}
}

func TestPoolShrinkLeavesHoldingsForTheCaller(t *testing.T) {
	a := New()
	a.SetPools([]Pool{pool(t, "p", false, "192.0.2.0/30")})
	ip, _, _ := a.Allocate("a", IPv4, []string{"p"}, Props{})
	a.SetPools([]Pool{pool(t, "p", false, "192.0.2.2/31")})
	p, _ := a.Pool("p")
	if p.Contains(ip) {
		t.Fatalf("shrunk pool still contains %v", ip)
	}
	if got := a.Assigned("a"); len(got) != 1 || got[0] != ip {
		t.Fatalf("holding lost on shrink: %v", got)
	}
	// Allocate refuses to hand out a second address while the stale one is held...
	if _, _, err := a.Allocate("a", IPv4, []string{"p"}, Props{}); err == nil {
		t.Fatal("Allocate ignored the stale holding")
	}
	// ... and after the caller releases it, moves a into the new range.
	a.Release("a")
	if got, _, err := a.Allocate("a", IPv4, []string{"p"}, Props{}); err != nil || got != addr("192.0.2.2") {
		t.Fatalf("moved to %v, %v", got, err)
	}
	if s := a.Stats("p"); s.AssignedIPv4 != 1 || s.AvailableIPv4 != 1 {
		t.Fatalf("stats after move %+v", s)
	}
}

func TestOverlaps(t *testing.T) {
	pools := []Pool{
		pool(t, "old", false, "192.0.2.0/25"),
		pool(t, "v6", false, "2001:db8::/64"),
		pool(t, "new", false, "192.0.2.100-192.0.2.200"),
		pool(t, "other", false, "192.0.2.128/25"), // overlaps only "new", which is dropped
	}
	got := Overlaps(pools)
	if len(got) != 1 || got["new"] != "old" {
		t.Fatalf("overlaps = %v, want only new->old", got)
	}
	if _, _, ok := RangesOverlap([]Range{mustRange(t, "192.0.2.0/24"), mustRange(t, "2001:db8::/64"), mustRange(t, "192.0.2.255")}); !ok {
		t.Fatal("RangesOverlap missed a self-overlap")
	}
}

func TestStatsIPv6Saturates(t *testing.T) {
	a := New()
	a.SetPools([]Pool{pool(t, "big", false, "2001:db8::/64", "2001:db8:1::/64")})
	if _, _, err := a.Allocate("a", IPv6, []string{"big"}, Props{}); err != nil {
		t.Fatal(err)
	}
	s := a.Stats("big")
	if s.AvailableIPv6 != math.MaxInt64 || s.AssignedIPv6 != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

// TestPropertyNoAddressHandedOutTwice runs random sequences of allocations, claims,
// releases and pool edits, and after every step checks the allocator's invariants:
// every address's holders may share it pairwise, a key holds at most one address per
// family, and the two indexes agree. Seeds are fixed so a failure reproduces.
func TestPropertyNoAddressHandedOutTwice(t *testing.T) {
	poolSets := [][]Pool{
		{pool(t, "a", false, "192.0.2.0/29", "2001:db8::/125"), pool(t, "b", true, "192.0.2.250-192.0.3.5")},
		{pool(t, "a", false, "192.0.2.4/30"), pool(t, "b", false, "192.0.3.0/30", "2001:db8::4/126")},
		{pool(t, "c", false, "192.0.2.0/28")},
	}
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k10", "k11"}
	ports := [][]Port{{{"TCP", 80}}, {{"TCP", 443}}, {{"UDP", 53}}, {{"TCP", 80}, {"TCP", 443}}}
	randProps := func(r *rand.Rand) Props {
		p := Props{Ports: ports[r.IntN(len(ports))], TrafficPolicy: []string{"Cluster", "Local"}[r.IntN(2)], Backends: []string{"x", "y"}[r.IntN(2)]}
		if r.IntN(3) > 0 {
			p.SharingKey = []string{"s", "t"}[r.IntN(2)]
		}
		return p
	}
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		a := New()
		a.SetPools(poolSets[0])
		for step := range 300 {
			key := keys[r.IntN(len(keys))]
			switch op := r.IntN(10); {
			case op < 5:
				fam := IPv4
				if r.IntN(3) == 0 {
					fam = IPv6
				}
				names := []string{"a", "b", "c"}
				r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
				ip, _, err := a.Allocate(key, fam, names[:1+r.IntN(3)], randProps(r))
				if err == nil && FamilyOf(ip) != fam {
					t.Fatalf("seed %d step %d: asked %s, got %v", seed, step, fam, ip)
				}
			case op < 7:
				// Claim a random address near the pools, as a restart or an explicit
				// request would.
				ip := netip.AddrFrom4([4]byte{192, 0, 2, byte(r.IntN(16))})
				_ = a.Claim(key, ip, randProps(r))
			case op < 9:
				if held := a.Assigned(key); len(held) > 0 && r.IntN(2) == 0 {
					a.ReleaseAddr(key, held[r.IntN(len(held))])
				} else {
					a.Release(key)
				}
			default:
				a.SetPools(poolSets[r.IntN(len(poolSets))])
			}
			checkInvariants(t, a, seed, step)
		}
	}
}

func checkInvariants(t *testing.T, a *Allocator, seed uint64, step int) {
	t.Helper()
	count := 0
	for ip, hs := range a.holders {
		if len(hs) == 0 {
			t.Fatalf("seed %d step %d: %v has an empty holder list", seed, step, ip)
		}
		for i := range hs {
			for j := i + 1; j < len(hs); j++ {
				if hs[i].key == hs[j].key {
					t.Fatalf("seed %d step %d: %s holds %v twice", seed, step, hs[i].key, ip)
				}
				if err := Compatible(hs[i].props, hs[j].props); err != nil {
					t.Fatalf("seed %d step %d: %v handed to %s and %s, which may not share: %v", seed, step, ip, hs[i].key, hs[j].key, err)
				}
			}
			if !slices.Contains(a.byKey[hs[i].key], ip) {
				t.Fatalf("seed %d step %d: indexes disagree on %s/%v", seed, step, hs[i].key, ip)
			}
			count++
		}
	}
	n := 0
	for k, addrs := range a.byKey {
		fams := map[Family]bool{}
		for _, ip := range addrs {
			if fams[FamilyOf(ip)] {
				t.Fatalf("seed %d step %d: %s holds two %s addresses: %v", seed, step, k, FamilyOf(ip), addrs)
			}
			fams[FamilyOf(ip)] = true
		}
		n += len(addrs)
	}
	if n != count {
		t.Fatalf("seed %d step %d: %d holdings by key, %d by address", seed, step, n, count)
	}
}
