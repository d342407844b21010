package servicelb

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

// stateWith is an allocation state over pools parsed from name -> address ranges; a pool
// whose ranges start with "!" is invalid.
func stateWith(t *testing.T, pools map[string][]string) *allocations {
	t.Helper()
	s := newAllocations()
	var objs []*v1alpha1.IPAddressPool
	for name, addrs := range pools {
		p := &v1alpha1.IPAddressPool{}
		p.Name = name
		p.Spec.Addresses = addrs
		objs = append(objs, p)
	}
	s.pools = parsePools(objs)
	var valid []addrpool.Pool
	for _, pi := range s.pools {
		if pi.valid {
			valid = append(valid, pi.pool)
		}
	}
	s.alloc.SetPools(valid)
	return s
}

func TestKeepOrRelease(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	v4 := []addrpool.Family{addrpool.IPv4}
	for _, tc := range []struct {
		name        string
		pools       map[string][]string
		svc         []svcOpt
		fams        []addrpool.Family
		requested   string
		candidates  []string
		unknown     bool
		origin      string
		wantRelease bool
		wantWhy     bool
		wantOrigin  string
	}{
		{name: "in an admitting pool: kept, verified", pools: map[string][]string{"p": {"192.0.2.0/24"}}, candidates: []string{"p"}, wantOrigin: "p"},
		{name: "family dropped: released", pools: map[string][]string{"p": {"192.0.2.0/24"}}, fams: []addrpool.Family{addrpool.IPv6}, wantRelease: true, wantWhy: true},
		{name: "another address requested: released", pools: map[string][]string{"p": {"192.0.2.0/24"}}, requested: "192.0.2.7", wantRelease: true, wantWhy: true},
		{name: "pools unknown: kept, unverified", unknown: true, wantWhy: true},
		{name: "no pool ever contained it: kept, unverified", pools: map[string][]string{"q": {"198.51.100.0/24"}}, wantWhy: true},
		{name: "its pool was deleted: kept, unverified", pools: map[string][]string{"q": {"198.51.100.0/24"}}, origin: "p", wantWhy: true, wantOrigin: "p"},
		{name: "its pool no longer contains it: released", pools: map[string][]string{"p": {"198.51.100.0/24"}}, origin: "p", wantRelease: true, wantWhy: true},
		{name: "named pool does not contain it: released", pools: map[string][]string{"p": {"198.51.100.0/24"}, "q": {"192.0.2.0/24"}},
			svc: []svcOpt{withAnnotation(AnnotationAddressPool, "p")}, wantRelease: true, wantWhy: true},
		{name: "named pool deleted: kept, unverified", pools: map[string][]string{"q": {"192.0.2.0/24"}},
			svc: []svcOpt{withAnnotation(AnnotationAddressPool, "p")}, wantWhy: true},
		{name: "no candidates but an admitting pool: kept", pools: map[string][]string{"p": {"192.0.2.0/24"}}, wantOrigin: "p"},
		{name: "pool no longer auto-assigns and others do: released", pools: map[string][]string{"p": {"192.0.2.0/24"}, "q": {"198.51.100.0/24"}},
			candidates: []string{"q"}, wantRelease: true, wantWhy: true, wantOrigin: "p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stateWith(t, tc.pools)
			if tc.origin != "" {
				s.origin[a] = tc.origin
			}
			fams := tc.fams
			if fams == nil {
				fams = v4
			}
			requested := map[addrpool.Family]netip.Addr{}
			if tc.requested != "" {
				requested[addrpool.IPv4] = netip.MustParseAddr(tc.requested)
			}
			why, release := s.keepOrRelease(lb("web", tc.svc...), a, fams, requested, nil, tc.candidates, !tc.unknown, labels.Set{})
			if release != tc.wantRelease || (why != "") != tc.wantWhy {
				t.Fatalf("why %q release %v; want a reason %v, release %v", why, release, tc.wantWhy, tc.wantRelease)
			}
			if tc.wantOrigin != "" && s.origin[a] != tc.wantOrigin {
				t.Errorf("origin %q, want %q", s.origin[a], tc.wantOrigin)
			}
		})
	}
}

func TestWaitingAndForgetService(t *testing.T) {
	s := newAllocations()
	s.pending["ns/a"], s.pending["ns/b"] = true, true
	s.badInput["ns/a"] = "bad"
	s.unverified["ns/a"] = map[netip.Addr]string{netip.MustParseAddr("192.0.2.1"): "why"}
	s.lastWritten["ns/a"] = []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	s.overwrites["ns/a"] = &overwriteEpisode{}
	if got := slices.Sorted(slices.Values(s.waiting())); !slices.Equal(got, []string{"ns/a", "ns/b"}) {
		t.Fatalf("waiting %v", got)
	}
	if tot := s.totals(); tot.pending != 2 || tot.unverified != 1 {
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

func TestOverwriteBackoff(t *testing.T) {
	ours := []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	theirs := []v1.LoadBalancerIngress{{IP: "198.51.100.1"}}
	s := newAllocations()
	now := time.Unix(1000, 0)
	if w, ep, rw := s.overwriteBackoff("ns/a", theirs, ours, now); w != 0 || ep || rw {
		t.Fatalf("nothing written yet: %v %v %v", w, ep, rw)
	}
	s.lastWritten["ns/a"] = ours
	if w, ep, rw := s.overwriteBackoff("ns/a", ours, ours, now); w != 0 || ep || rw {
		t.Fatalf("status is ours: %v %v %v", w, ep, rw)
	}
	type step struct {
		after   time.Duration
		wait    time.Duration
		episode bool
		rewrite bool
	}
	for i, st := range []step{
		{0, 0, true, true}, // put back at once, new episode
		{time.Second, overwriteBase - time.Second, false, false}, // then wait for the base
		{overwriteBase, 0, false, true},
		{time.Second, 2*overwriteBase - time.Second, false, false}, // doubling
		{2 * overwriteBase, 0, false, true},
		{4 * overwriteBase, 0, false, true},
		{8 * overwriteBase, 0, false, true},
		{overwriteSlow - time.Second, time.Second, false, false}, // capped at overwriteSlow
		{time.Second, 0, false, true},
		{overwriteSlow + overwriteQuiet + time.Minute, 0, true, true}, // quiet long enough: a new episode
	} {
		now = now.Add(st.after)
		w, ep, rw := s.overwriteBackoff("ns/a", theirs, ours, now)
		if w != st.wait || ep != st.episode || rw != st.rewrite {
			t.Fatalf("step %d: wait %v episode %v rewrite %v, want %+v", i, w, ep, rw, st)
		}
	}
}
