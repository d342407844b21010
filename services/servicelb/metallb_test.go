package servicelb

import (
	"net/netip"
	"slices"
	"testing"

	mlb "go.universe.tf/metallb/api/v1beta1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
)

// metalState is an allocation state reading MetalLB pools only.
func metalState(t *testing.T, pools ...*mlb.IPAddressPool) *allocations {
	t.Helper()
	s := newAllocations(PoolAPIMetalLB)
	var parsed []parsedPool
	for _, p := range pools {
		parsed = append(parsed, parsedPool{created: p.CreationTimestamp, info: parseMetalLBPool(p)})
	}
	s.pools = checkOverlaps(parsed)
	var valid []addrpool.Pool
	for _, pi := range s.pools {
		if !pi.valid {
			t.Fatalf("pool %s invalid: %s", pi.name, pi.message)
		}
		valid = append(valid, pi.pool)
	}
	s.alloc.SetPools(valid)
	return s
}

func metal(name string, sa *mlb.ServiceAllocation, addrs ...string) *mlb.IPAddressPool {
	return &mlb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: mlb.IPAddressPoolSpec{Addresses: addrs, AllocateTo: sa}}
}

func TestMetalLBPoolOrder(t *testing.T) {
	s := metalState(t,
		metal("zero", &mlb.ServiceAllocation{}, "192.0.2.0/30"),
		metal("two", &mlb.ServiceAllocation{Priority: 2}, "192.0.2.4/30"),
		metal("one", &mlb.ServiceAllocation{Priority: 1}, "192.0.2.8/30"),
		metal("b-free", nil, "192.0.2.12/30"),
		metal("a-free", nil, "192.0.2.16/30"),
		metal("other-ns", &mlb.ServiceAllocation{Priority: 1, Namespaces: []string{"elsewhere"}}, "192.0.2.20/30"),
	)
	got, err := candidatePoolsFor(s.pools, lb("web"), nil, s.apis)
	want := []string{"metallb.io/one", "metallb.io/two", "metallb.io/zero", "metallb.io/a-free", "metallb.io/b-free"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("candidates %v (%v), want %v", got, err, want)
	}
}

func TestMetalLBAdmits(t *testing.T) {
	sel := func(k, v string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	pi := parseMetalLBPool(metal("p", &mlb.ServiceAllocation{
		Namespaces:         []string{testNS},
		NamespaceSelectors: []metav1.LabelSelector{sel("team", "a")},
		ServiceSelectors:   []metav1.LabelSelector{sel("app", "web"), sel("tier", "edge")},
	}, "192.0.2.0/30"))
	withLabels := func(l map[string]string) svcOpt { return func(s *v1.Service) { s.Labels = l } }
	inNS := func(ns string) svcOpt { return func(s *v1.Service) { s.Namespace = ns } }
	for _, tc := range []struct {
		name string
		svc  *v1.Service
		ns   labels.Set
		want bool
	}{
		{"listed namespace, first selector", lb("x", withLabels(map[string]string{"app": "web"})), nil, true},
		{"listed namespace, second selector", lb("x", withLabels(map[string]string{"tier": "edge"})), nil, true},
		{"listed namespace, no selector matches", lb("x"), nil, false},
		{"namespace by selector", lb("x", inNS("other"), withLabels(map[string]string{"app": "web"})), labels.Set{"team": "a"}, true},
		{"namespace neither listed nor selected", lb("x", inNS("other"), withLabels(map[string]string{"app": "web"})), labels.Set{"team": "b"}, false},
	} {
		if got := pi.admits(tc.svc, tc.ns); got != tc.want {
			t.Errorf("%s: admits %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMetalLBRequestedIPs(t *testing.T) {
	v4 := []addrpool.Family{addrpool.IPv4}
	apis := []string{PoolAPIMetalLB}
	both := lb("x", withAnnotation(AnnotationMetalLBLoadBalancerIPs, "192.0.2.1"), func(s *v1.Service) { s.Spec.LoadBalancerIP = "192.0.2.2" })
	if _, err := requestedIPsFor(both, v4, apis); err == nil {
		t.Error("annotation and spec.loadBalancerIP together: no error")
	}
	legacy := lb("x", withAnnotation(LegacyAnnotationMetalLBLBIPs, "192.0.2.3"))
	if got, err := requestedIPsFor(legacy, v4, apis); err != nil || got[addrpool.IPv4] != netip.MustParseAddr("192.0.2.3") {
		t.Errorf("legacy annotation: %v %v", got, err)
	}
	current := lb("x", withAnnotation(AnnotationMetalLBLoadBalancerIPs, "192.0.2.4"), withAnnotation(LegacyAnnotationMetalLBLBIPs, "192.0.2.3"))
	if got, _ := requestedIPsFor(current, v4, apis); got[addrpool.IPv4] != netip.MustParseAddr("192.0.2.4") {
		t.Errorf("current name must win: %v", got)
	}
	own := lb("x", withAnnotation(AnnotationLoadBalancerIPs, "192.0.2.5"))
	if got, err := requestedIPsFor(own, v4, apis); err != nil || len(got) != 0 {
		t.Errorf("kcm-split's annotation read with --pool-api=metallb: %v %v", got, err)
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
		plan := s.assign(klog.Background(), testNS+"/"+svc.Name, svc, nil, assignInputs{known: true})
		var got []string
		for _, in := range plan.ingress {
			got = append(got, in.IP)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v (%v), want %v", tc.policy, got, plan.pendingWhy, tc.want)
		}
	}
	// The pool with both families is out of IPv6 addresses: PreferDualStack takes IPv4
	// from the first pool in order, RequireDualStack waits.
	for i := 0; i < 2; i++ {
		svc := lb("v6-"+string(rune('a'+i)), func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol} })
		if plan := s.assign(klog.Background(), testNS+"/"+svc.Name, svc, nil, assignInputs{known: true}); len(plan.ingress) != 1 {
			t.Fatalf("v6 filler: %v", plan.pendingWhy)
		}
	}
	prefer := lb("prefer", func(s *v1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	})
	if plan := s.assign(klog.Background(), testNS+"/prefer", prefer, nil, assignInputs{known: true}); len(plan.ingress) != 1 || plan.ingress[0].IP != "192.0.2.1" {
		t.Errorf("PreferDualStack without IPv6 left: %v (%v)", plan.ingress, plan.pendingWhy)
	}
	require := lb("require", func(s *v1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	})
	plan := s.assign(klog.Background(), testNS+"/require", require, nil, assignInputs{known: true})
	if len(plan.ingress) != 0 || plan.waitReason != WaitPoolExhausted {
		t.Errorf("RequireDualStack without IPv6 left: %v, reason %q", plan.ingress, plan.waitReason)
	}
}
