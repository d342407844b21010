package allocation

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
	mlb "go.universe.tf/metallb/api/v1beta1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

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
			svc: []svcOpt{withAnnotation(poolsource.AnnotationAddressPool, "p")}, wantRelease: true, wantWhy: true},
		{name: "named pool deleted: kept, unverified", pools: map[string][]string{"q": {"192.0.2.0/24"}},
			svc: []svcOpt{withAnnotation(poolsource.AnnotationAddressPool, "p")}, wantWhy: true},
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

// Over 80 lines: most of it is the table of cases.
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
			svc: []svcOpt{withAnnotation(poolsource.AnnotationLoadBalancerIPs, "nope")}, wantBadInput: true, wantPending: true},
		{name: "requested address: allocated", pools: map[string][]string{"p": {"192.0.2.0/24"}},
			svc: []svcOpt{withAnnotation(poolsource.AnnotationLoadBalancerIPs, "192.0.2.7")}, want: []string{"192.0.2.7/32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := lb("web", tc.svc...)
			key := svc.Namespace + "/" + svc.Name
			s := stateHolding(t, tc.pools, svc, tc.held...)
			plan := s.Assign(klog.Background(), key, svc, nil, Inputs{Known: !tc.unknown})
			if len(plan.Ingress) != len(tc.want) {
				t.Fatalf("ingress %v, want addresses in %v", plan.Ingress, tc.want)
			}
			for i, in := range plan.Ingress {
				if !netip.MustParsePrefix(tc.want[i]).Contains(netip.MustParseAddr(in.IP)) {
					t.Errorf("ingress %d is %s, want one in %s", i, in.IP, tc.want[i])
				}
			}
			var moved []string
			for _, m := range plan.Moved {
				moved = append(moved, m.From.String())
				if m.Why == "" {
					t.Errorf("%s moved without a reason", m.From)
				}
			}
			if !slices.Equal(moved, tc.wantMoved) || len(plan.Freed) != len(tc.wantMoved) {
				t.Errorf("moved %v, freed %v; want %v", moved, plan.Freed, tc.wantMoved)
			}
			var unverified []string
			for a := range plan.Unverified {
				unverified = append(unverified, a.String())
			}
			if !slices.Equal(unverified, tc.wantUnverified) || plan.NewUnverified != (len(tc.wantUnverified) > 0) {
				t.Errorf("unverified %v (new %v), want %v", plan.Unverified, plan.NewUnverified, tc.wantUnverified)
			}
			if plan.NewlyPending != tc.wantPending || s.pending[key] != tc.wantPending || (plan.PendingWhy != nil) != tc.wantPending {
				t.Errorf("newly pending %v (%v), pending %v; want %v", plan.NewlyPending, plan.PendingWhy, s.pending[key], tc.wantPending)
			}
			if (plan.BadInput != nil) != tc.wantBadInput || plan.NewBadInput != tc.wantBadInput {
				t.Errorf("bad input %v (new %v), want %v", plan.BadInput, plan.NewBadInput, tc.wantBadInput)
			}
			// The allocator holds exactly what the status is to show.
			got := s.alloc.Assigned(key)
			if len(got) != len(plan.Ingress) {
				t.Errorf("allocator holds %v for ingress %v", got, plan.Ingress)
			}
			if e := plan.Effects; e.Gauges.Level != GaugesAll || e.Gauges.Seq == 0 || len(e.Pools) != len(tc.pools) {
				t.Errorf("effects %+v: want every pool refreshed and every gauge shown", e)
			}

			// The same decision again reports nothing new and changes nothing.
			again := s.Assign(klog.Background(), key, svc, nil, Inputs{Known: !tc.unknown})
			if again.NewlyPending || again.NewBadInput || again.NewUnverified || len(again.Moved) > 0 || len(again.Freed) > 0 {
				t.Errorf("second decision reports again: %+v", again)
			}
			if !IngressEqual(again.Ingress, plan.Ingress) {
				t.Errorf("second decision: ingress %v, first %v", again.Ingress, plan.Ingress)
			}
			if again.Effects.Gauges.Seq <= plan.Effects.Gauges.Seq {
				t.Errorf("gauge seq %d after %d", again.Effects.Gauges.Seq, plan.Effects.Gauges.Seq)
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
	plan := s.Assign(klog.Background(), key, svc, []netip.Addr{shown}, Inputs{Known: true})
	if len(plan.Ingress) != 1 || plan.Ingress[0].IP != "192.0.2.9" {
		t.Fatalf("ingress %v, want the adopted address", plan.Ingress)
	}
	if !slices.Equal(plan.Freed, []netip.Addr{netip.MustParseAddr("192.0.2.1")}) {
		t.Fatalf("freed %v, want our own unpublished choice", plan.Freed)
	}
	if h := s.alloc.Holders(shown); !slices.Equal(h, []string{key}) {
		t.Fatalf("holders of the adopted address %v", h)
	}
}

func TestAssignRetriesTheWaitingWhenItFreesAnAddress(t *testing.T) {
	svc := lb("web")
	s := stateHolding(t, map[string][]string{"p": {"198.51.100.0/24"}}, svc, held{"192.0.2.1", "p"})
	s.pending["ns/other"] = true
	plan := s.Assign(klog.Background(), testNS+"/web", svc, nil, Inputs{Known: true})
	if len(plan.Freed) != 1 || !slices.Equal(plan.Effects.Requeue, []string{"ns/other"}) {
		t.Fatalf("freed %v, requeue %v", plan.Freed, plan.Effects.Requeue)
	}
	if plan.Effects.Gauges.pendingSum() != 1 {
		t.Fatalf("gauges %+v", plan.Effects.Gauges)
	}
}

// TestMetalLBOnePool: a dual-stack Service gets both addresses from one MetalLB pool, even
// when a pool of higher priority has the first family free.
func TestMetalLBOnePool(t *testing.T) {
	s := metalState(t,
		metal("v4only", &mlb.ServiceAllocation{Priority: 1}, "192.0.2.0/30"),
		metal("both", &mlb.ServiceAllocation{Priority: 2}, "192.0.2.8/30", "2001:db8::/126"),
	)
	for _, tc := range []struct {
		policy v1.IPFamilyPolicy
		fams   []v1.IPFamily
		want   []string
	}{
		{v1.IPFamilyPolicySingleStack, []v1.IPFamily{v1.IPv4Protocol}, []string{"192.0.2.0"}},
		{v1.IPFamilyPolicyRequireDualStack, []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, []string{"192.0.2.8", "2001:db8::"}},
		{v1.IPFamilyPolicyPreferDualStack, []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}, []string{"2001:db8::1", "192.0.2.9"}},
	} {
		svc := lb(string(tc.policy), func(s *v1.Service) { s.Spec.IPFamilyPolicy = ptr.To(tc.policy); s.Spec.IPFamilies = tc.fams })
		plan := s.Assign(klog.Background(), testNS+"/"+svc.Name, svc, nil, Inputs{Known: true})
		var got []string
		for _, in := range plan.Ingress {
			got = append(got, in.IP)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v (%v), want %v", tc.policy, got, plan.PendingWhy, tc.want)
		}
	}
	// The pool with both families is out of IPv6 addresses: PreferDualStack takes IPv4
	// from the first pool in order, RequireDualStack waits.
	for i := 0; i < 2; i++ {
		svc := lb("v6-"+string(rune('a'+i)), func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol} })
		if plan := s.Assign(klog.Background(), testNS+"/"+svc.Name, svc, nil, Inputs{Known: true}); len(plan.Ingress) != 1 {
			t.Fatalf("v6 filler: %v", plan.PendingWhy)
		}
	}
	prefer := lb("prefer", func(s *v1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	})
	if plan := s.Assign(klog.Background(), testNS+"/prefer", prefer, nil, Inputs{Known: true}); len(plan.Ingress) != 1 || plan.Ingress[0].IP != "192.0.2.1" {
		t.Errorf("PreferDualStack without IPv6 left: %v (%v)", plan.Ingress, plan.PendingWhy)
	}
	require := lb("require", func(s *v1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	})
	plan := s.Assign(klog.Background(), testNS+"/require", require, nil, Inputs{Known: true})
	if len(plan.Ingress) != 0 || plan.WaitReason != WaitPoolExhausted {
		t.Errorf("RequireDualStack without IPv6 left: %v, reason %q", plan.Ingress, plan.WaitReason)
	}
}
