package servicelb

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

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

// held is an address a Service holds before a decision, and the pool it was last seen in.
type held struct {
	addr, origin string
}

// stateHolding is stateWith where key already holds addrs.
func stateHolding(t *testing.T, pools map[string][]string, svc *v1.Service, addrs ...held) *allocations {
	t.Helper()
	s := stateWith(t, pools)
	key := svc.Namespace + "/" + svc.Name
	for _, h := range addrs {
		a := netip.MustParseAddr(h.addr)
		if err := s.alloc.Claim(key, a, propsOf(svc)); err != nil {
			t.Fatal(err)
		}
		if h.origin != "" {
			s.origin[a] = h.origin
		}
	}
	return s
}

func TestAssign(t *testing.T) {
	dualStack := func(s *v1.Service) {
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
	}
	for _, tc := range []struct {
		name    string
		pools   map[string][]string
		unknown bool
		svc     []svcOpt
		held    []held
		// want are the prefixes the ingress addresses lie in, in order.
		want           []string
		wantMoved      []string
		wantUnverified []string
		wantPending    bool
		wantBadInput   bool
	}{
		{name: "held in an admitting pool: kept", pools: map[string][]string{"p": {"192.0.2.0/24"}},
			held: []held{{"192.0.2.1", "p"}}, want: []string{"192.0.2.1/32"}},
		{name: "its pool was deleted: kept, unverified", pools: map[string][]string{"q": {"198.51.100.0/24"}},
			held: []held{{"192.0.2.1", "p"}}, want: []string{"192.0.2.1/32"}, wantUnverified: []string{"192.0.2.1"}},
		{name: "pools unknown: kept, unverified", unknown: true,
			held: []held{{"192.0.2.1", "p"}}, want: []string{"192.0.2.1/32"}, wantUnverified: []string{"192.0.2.1"}},
		{name: "its valid pool no longer contains it: released and moved", pools: map[string][]string{"p": {"198.51.100.0/24"}},
			held: []held{{"192.0.2.1", "p"}}, want: []string{"198.51.100.0/24"}, wantMoved: []string{"192.0.2.1"}},
		{name: "dual stack: the missing family allocated", pools: map[string][]string{"v4": {"192.0.2.0/24"}, "v6": {"2001:db8::/120"}},
			svc: []svcOpt{dualStack}, held: []held{{"192.0.2.1", "v4"}}, want: []string{"192.0.2.1/32", "2001:db8::/120"}},
		{name: "dual stack, one family missing from every pool: pending, keeps what it held",
			pools: map[string][]string{"v4": {"192.0.2.0/24"}}, svc: []svcOpt{dualStack}, held: []held{{"192.0.2.1", "v4"}},
			want: []string{"192.0.2.1/32"}, wantPending: true},
		{name: "dual stack, one family missing: takes nothing new", pools: map[string][]string{"v4": {"192.0.2.0/24"}},
			svc: []svcOpt{dualStack}, wantPending: true},
		{name: "no pool: pending", pools: map[string][]string{}, wantPending: true},
		{name: "pools unknown, nothing held: pending", unknown: true, wantPending: true},
		{name: "bad request: reported, pending", pools: map[string][]string{"p": {"192.0.2.0/24"}},
			svc: []svcOpt{withAnnotation(AnnotationLoadBalancerIPs, "nope")}, wantBadInput: true, wantPending: true},
		{name: "requested address: allocated", pools: map[string][]string{"p": {"192.0.2.0/24"}},
			svc: []svcOpt{withAnnotation(AnnotationLoadBalancerIPs, "192.0.2.7")}, want: []string{"192.0.2.7/32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := lb("web", tc.svc...)
			key := svc.Namespace + "/" + svc.Name
			s := stateHolding(t, tc.pools, svc, tc.held...)
			plan := s.assign(klog.Background(), key, svc, nil, assignInputs{known: !tc.unknown})
			if len(plan.ingress) != len(tc.want) {
				t.Fatalf("ingress %v, want addresses in %v", plan.ingress, tc.want)
			}
			for i, in := range plan.ingress {
				if !netip.MustParsePrefix(tc.want[i]).Contains(netip.MustParseAddr(in.IP)) {
					t.Errorf("ingress %d is %s, want one in %s", i, in.IP, tc.want[i])
				}
			}
			var moved []string
			for _, m := range plan.moved {
				moved = append(moved, m.from.String())
				if m.why == "" {
					t.Errorf("%s moved without a reason", m.from)
				}
			}
			if !slices.Equal(moved, tc.wantMoved) || len(plan.freed) != len(tc.wantMoved) {
				t.Errorf("moved %v, freed %v; want %v", moved, plan.freed, tc.wantMoved)
			}
			var unverified []string
			for a := range plan.unverified {
				unverified = append(unverified, a.String())
			}
			if !slices.Equal(unverified, tc.wantUnverified) || plan.newUnverified != (len(tc.wantUnverified) > 0) {
				t.Errorf("unverified %v (new %v), want %v", plan.unverified, plan.newUnverified, tc.wantUnverified)
			}
			if plan.newlyPending != tc.wantPending || s.pending[key] != tc.wantPending || (plan.pendingWhy != nil) != tc.wantPending {
				t.Errorf("newly pending %v (%v), pending %v; want %v", plan.newlyPending, plan.pendingWhy, s.pending[key], tc.wantPending)
			}
			if (plan.badInput != nil) != tc.wantBadInput || plan.newBadInput != tc.wantBadInput {
				t.Errorf("bad input %v (new %v), want %v", plan.badInput, plan.newBadInput, tc.wantBadInput)
			}
			// The allocator holds exactly what the status is to show.
			got := s.alloc.Assigned(key)
			if len(got) != len(plan.ingress) {
				t.Errorf("allocator holds %v for ingress %v", got, plan.ingress)
			}
			if e := plan.effects; e.gauges.level != gaugesAll || e.gauges.seq == 0 || len(e.pools) != len(tc.pools) {
				t.Errorf("effects %+v: want every pool refreshed and every gauge shown", e)
			}

			// The same decision again reports nothing new and changes nothing.
			again := s.assign(klog.Background(), key, svc, nil, assignInputs{known: !tc.unknown})
			if again.newlyPending || again.newBadInput || again.newUnverified || len(again.moved) > 0 || len(again.freed) > 0 {
				t.Errorf("second decision reports again: %+v", again)
			}
			if !ingressEqual(again.ingress, plan.ingress) {
				t.Errorf("second decision: ingress %v, first %v", again.ingress, plan.ingress)
			}
			if again.effects.gauges.seq <= plan.effects.gauges.seq {
				t.Errorf("gauge seq %d after %d", again.effects.gauges.seq, plan.effects.gauges.seq)
			}
		})
	}
}

func TestAssignAdoptsWhatAnotherWriterShowed(t *testing.T) {
	svc := lb("web")
	key := testNS + "/web"
	s := stateHolding(t, map[string][]string{"p": {"192.0.2.0/24"}}, svc, held{"192.0.2.1", "p"})
	shown := netip.MustParseAddr("192.0.2.9")
	// Found claimed by another process before: reserved under the taken key.
	if err := s.alloc.Claim(takenKey(shown), shown, addrpool.Props{}); err != nil {
		t.Fatal(err)
	}
	plan := s.assign(klog.Background(), key, svc, []netip.Addr{shown}, assignInputs{known: true})
	if len(plan.ingress) != 1 || plan.ingress[0].IP != "192.0.2.9" {
		t.Fatalf("ingress %v, want the adopted address", plan.ingress)
	}
	if !slices.Equal(plan.freed, []netip.Addr{netip.MustParseAddr("192.0.2.1")}) {
		t.Fatalf("freed %v, want our own unpublished choice", plan.freed)
	}
	if h := s.alloc.Holders(shown); !slices.Equal(h, []string{key}) {
		t.Fatalf("holders of the adopted address %v", h)
	}
}

func TestAssignRetriesTheWaitingWhenItFreesAnAddress(t *testing.T) {
	svc := lb("web")
	s := stateHolding(t, map[string][]string{"p": {"198.51.100.0/24"}}, svc, held{"192.0.2.1", "p"})
	s.pending["ns/other"] = true
	plan := s.assign(klog.Background(), testNS+"/web", svc, nil, assignInputs{known: true})
	if len(plan.freed) != 1 || !slices.Equal(plan.effects.requeue, []string{"ns/other"}) {
		t.Fatalf("freed %v, requeue %v", plan.freed, plan.effects.requeue)
	}
	if plan.effects.gauges.pendingSum() != 1 {
		t.Fatalf("gauges %+v", plan.effects.gauges)
	}
}

func TestRelease(t *testing.T) {
	svc := lb("web")
	key := testNS + "/web"
	s := stateHolding(t, map[string][]string{"p": {"192.0.2.0/24"}}, svc, held{"192.0.2.1", "p"})
	s.pending["ns/other"] = true
	s.lastWritten[key] = []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	got, freed, e := s.release(key)
	a := netip.MustParseAddr("192.0.2.1")
	if !slices.Equal(got, []netip.Addr{a}) || !slices.Equal(freed, []netip.Addr{a}) {
		t.Fatalf("held %v freed %v", got, freed)
	}
	if !slices.Equal(e.requeue, []string{"ns/other"}) || !slices.Equal(e.pools, []string{"p"}) || e.gauges.level != gaugesAll || e.gauges.pools["p"].AssignedIPv4 != 0 {
		t.Fatalf("effects %+v", e)
	}
	if _, ok := s.origin[a]; ok || len(s.lastWritten) != 0 {
		t.Fatal("bookkeeping of the released Service kept")
	}
	if got, freed, e := s.release(key); got != nil || freed != nil || len(e.requeue) != 0 || e.gauges.level != gaugesAll {
		t.Fatalf("second release: %v %v %+v", got, freed, e)
	}
}

func TestTakenElsewhereUntilTheClaimIsDeleted(t *testing.T) {
	svc := lb("web")
	key := testNS + "/web"
	a := netip.MustParseAddr("192.0.2.1")
	s := stateHolding(t, map[string][]string{"p": {"192.0.2.0/24"}}, svc, held{"192.0.2.1", "p"})
	e := s.takenElsewhere(key, a, "")
	if h := s.alloc.Holders(a); !slices.Equal(h, []string{takenKey(a)}) || e.gauges.level != gaugesAll {
		t.Fatalf("holders %v, effects %+v", h, e)
	}
	if s.heldByOthers(key, a) {
		t.Fatal("an address claimed by another process counts as held by a Service")
	}
	s.pending[key] = true
	e = s.claimDeleted(a, true)
	if len(s.alloc.Holders(a)) != 0 || !slices.Equal(e.requeue, []string{key}) {
		t.Fatalf("holders %v, effects %+v", s.alloc.Holders(a), e)
	}
	if e := s.claimDeleted(netip.Addr{}, false); !slices.Equal(e.requeue, []string{key}) || len(e.pools) != 0 {
		t.Fatalf("a claim that is no address: effects %+v", e)
	}
}

func TestRollbackKeepsWhatTheStatusShows(t *testing.T) {
	svc := lb("web", func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} })
	key := testNS + "/web"
	s := stateHolding(t, map[string][]string{"p": {"192.0.2.0/24"}}, svc, held{"192.0.2.1", "p"}, held{"2001:db8::1", ""})
	s.rollback(key, []netip.Addr{netip.MustParseAddr("192.0.2.1")})
	if got := s.alloc.Assigned(key); !slices.Equal(got, []netip.Addr{netip.MustParseAddr("192.0.2.1")}) {
		t.Fatalf("after rollback %v", got)
	}
}

func TestRestore(t *testing.T) {
	s := stateWith(t, map[string][]string{"p": {"192.0.2.0/24"}})
	a, b, c := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	var notKept []string
	r := s.restore(
		[]restoredService{{key: "ns/old", addrs: []netip.Addr{a}}, {key: "ns/new", addrs: []netip.Addr{a}}},
		[]restoredClaim{
			{addr: a, pool: "gone", parent: "ns/new"}, // shown by another: stays ns/old's
			{addr: b, parent: "ns/waiting"},
			{addr: c, parent: "ns/unhandled", skip: true},
		},
		func(key string, _ netip.Addr, _ error) { notKept = append(notKept, key) })
	if r.fromStatus != 1 || r.fromClaims != 1 || !slices.Equal(notKept, []string{"ns/new"}) {
		t.Fatalf("restored %+v, not kept %v", r, notKept)
	}
	if !slices.Equal(r.requeue, []string{"ns/waiting"}) || r.gauges.level != gaugesAll || r.gauges.assignedIPv4Sum() != 2 {
		t.Fatalf("effects %+v", r.effects)
	}
	if len(s.alloc.Holders(c)) != 0 || s.origin[a] != "gone" || s.origin[b] != "p" || !s.restored {
		t.Fatalf("holders of c %v, origins %v, restored %v", s.alloc.Holders(c), s.origin, s.restored)
	}
}

func (t totals) pendingSum() (n int) {
	for _, v := range t.pending {
		n += v
	}
	return n
}

func (t totals) unverifiedSum() (n int) {
	for _, v := range t.unverified {
		n += v
	}
	return n
}

func (t totals) assignedIPv4Sum() (n int64) {
	for _, st := range t.pools {
		n += st.AssignedIPv4
	}
	return n
}
