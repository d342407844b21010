package allocation

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	v1 "k8s.io/api/core/v1"
)

func TestWaitingAndForgetService(t *testing.T) {
	s := New()
	s.pending["ns/a"], s.pending["ns/b"] = true, true
	s.badInput["ns/a"] = "bad"
	s.unverified["ns/a"] = map[netip.Addr]string{netip.MustParseAddr("192.0.2.1"): "why"}
	s.lastWritten["ns/a"] = []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	s.overwrites["ns/a"] = &overwriteEpisode{}
	if got := slices.Sorted(slices.Values(s.waiting())); !slices.Equal(got, []string{"ns/a", "ns/b"}) {
		t.Fatalf("waiting %v", got)
	}
	if tot := s.totals(); tot.pendingSum() != 2 || tot.unverifiedSum() != 1 {
		t.Fatalf("totals %+v", tot)
	}
	for _, tc := range []struct {
		key  string
		want bool
	}{{"ns/a", true}, {"ns/a", false}, {"ns/c", false}} {
		if got := s.forgetService(tc.key); got != tc.want {
			t.Errorf("forgetService(%s) = %v, want %v", tc.key, got, tc.want)
		}
	}
	if len(s.badInput)+len(s.unverified)+len(s.lastWritten)+len(s.overwrites) != 0 || !s.pending["ns/b"] {
		t.Fatalf("state after forgetting ns/a: %+v", s)
	}
}

func TestForgetAddrKeepsTheOriginOfAHeldAddress(t *testing.T) {
	s := stateWith(t, map[string][]string{"p": {"192.0.2.0/24"}})
	a := netip.MustParseAddr("192.0.2.1")
	if err := s.alloc.Claim("ns/a", a, addrpool.Props{}); err != nil {
		t.Fatal(err)
	}
	s.origin[a] = "p"
	s.forgetAddr(a)
	if s.origin[a] != "p" {
		t.Fatal("origin of a held address forgotten")
	}
	s.alloc.Release("ns/a")
	s.forgetAddr(a)
	if _, ok := s.origin[a]; ok {
		t.Fatal("origin of a free address kept")
	}
	if got := s.validPoolContaining(a); got != "p" {
		t.Fatalf("validPoolContaining %q", got)
	}
}

func TestRelease(t *testing.T) {
	svc := lb("web")
	key := testNS + "/web"
	s := stateHolding(t, map[string][]string{"p": {"192.0.2.0/24"}}, svc, held{"192.0.2.1", "p"})
	s.pending["ns/other"] = true
	s.lastWritten[key] = []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	got, freed, e := s.Release(key)
	a := netip.MustParseAddr("192.0.2.1")
	if !slices.Equal(got, []netip.Addr{a}) || !slices.Equal(freed, []netip.Addr{a}) {
		t.Fatalf("held %v freed %v", got, freed)
	}
	if !slices.Equal(e.Requeue, []string{"ns/other"}) || !slices.Equal(e.Pools, []string{"p"}) || e.Gauges.Level != GaugesAll || e.Gauges.Pools["p"].AssignedIPv4 != 0 {
		t.Fatalf("effects %+v", e)
	}
	if _, ok := s.origin[a]; ok || len(s.lastWritten) != 0 {
		t.Fatal("bookkeeping of the released Service kept")
	}
	if got, freed, e := s.Release(key); got != nil || freed != nil || len(e.Requeue) != 0 || e.Gauges.Level != GaugesAll {
		t.Fatalf("second release: %v %v %+v", got, freed, e)
	}
}

func TestTakenElsewhereUntilTheClaimIsDeleted(t *testing.T) {
	svc := lb("web")
	key := testNS + "/web"
	a := netip.MustParseAddr("192.0.2.1")
	s := stateHolding(t, map[string][]string{"p": {"192.0.2.0/24"}}, svc, held{"192.0.2.1", "p"})
	e := s.TakenElsewhere(key, a, "")
	if h := s.alloc.Holders(a); !slices.Equal(h, []string{takenKey(a)}) || e.Gauges.Level != GaugesAll {
		t.Fatalf("holders %v, effects %+v", h, e)
	}
	if s.HeldByOthers(key, a) {
		t.Fatal("an address claimed by another process counts as held by a Service")
	}
	s.pending[key] = true
	e = s.ClaimDeleted(a, true)
	if len(s.alloc.Holders(a)) != 0 || !slices.Equal(e.Requeue, []string{key}) {
		t.Fatalf("holders %v, effects %+v", s.alloc.Holders(a), e)
	}
	if e := s.ClaimDeleted(netip.Addr{}, false); !slices.Equal(e.Requeue, []string{key}) || len(e.Pools) != 0 {
		t.Fatalf("a claim that is no address: effects %+v", e)
	}
}

func TestRollbackKeepsWhatTheStatusShows(t *testing.T) {
	svc := lb("web", func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} })
	key := testNS + "/web"
	s := stateHolding(t, map[string][]string{"p": {"192.0.2.0/24"}}, svc, held{"192.0.2.1", "p"}, held{"2001:db8::1", ""})
	s.Rollback(key, []netip.Addr{netip.MustParseAddr("192.0.2.1")})
	if got := s.alloc.Assigned(key); !slices.Equal(got, []netip.Addr{netip.MustParseAddr("192.0.2.1")}) {
		t.Fatalf("after rollback %v", got)
	}
}

func TestRestore(t *testing.T) {
	s := stateWith(t, map[string][]string{"p": {"192.0.2.0/24"}})
	a, b, c := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	var notKept []string
	r := s.Restore(
		[]RestoredService{{Key: "ns/old", Addrs: []netip.Addr{a}}, {Key: "ns/new", Addrs: []netip.Addr{a}}},
		[]RestoredClaim{
			{Addr: a, Pool: "gone", Parent: "ns/new"}, // shown by another: stays ns/old's
			{Addr: b, Parent: "ns/waiting"},
			{Addr: c, Parent: "ns/unhandled", Skip: true},
		},
		func(key string, _ netip.Addr, _ error) { notKept = append(notKept, key) })
	if r.FromStatus != 1 || r.FromClaims != 1 || !slices.Equal(notKept, []string{"ns/new"}) {
		t.Fatalf("restored %+v, not kept %v", r, notKept)
	}
	if !slices.Equal(r.Requeue, []string{"ns/waiting"}) || r.Gauges.Level != GaugesAll || r.Gauges.assignedIPv4Sum() != 2 {
		t.Fatalf("effects %+v", r.Effects)
	}
	if len(s.alloc.Holders(c)) != 0 || s.origin[a] != "gone" || s.origin[b] != "p" || !s.restored {
		t.Fatalf("holders of c %v, origins %v, restored %v", s.alloc.Holders(c), s.origin, s.restored)
	}
}

func (t Totals) pendingSum() (n int) {
	for _, v := range t.Pending {
		n += v
	}
	return n
}

func (t Totals) unverifiedSum() (n int) {
	for _, v := range t.Unverified {
		n += v
	}
	return n
}

func (t Totals) assignedIPv4Sum() (n int64) {
	for _, st := range t.Pools {
		n += st.AssignedIPv4
	}
	return n
}
