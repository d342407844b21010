package allocation

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/servicelb/internal/testobj"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"

	mlb "go.universe.tf/metallb/api/v1beta1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

func TestRequestedIPs(t *testing.T) {
	v4 := []addrpool.Family{addrpool.IPv4}
	both := []addrpool.Family{addrpool.IPv4, addrpool.IPv6}
	for _, tc := range []struct {
		name string
		ann  string
		spec string
		fams []addrpool.Family
		want []string
		err  string
	}{
		{name: "none", fams: v4},
		{name: "annotation", ann: "192.0.2.1", fams: v4, want: []string{"192.0.2.1"}},
		{name: "spec field", spec: "192.0.2.2", fams: v4, want: []string{"192.0.2.2"}},
		{name: "annotation wins", ann: "192.0.2.1", spec: "192.0.2.2", fams: v4, want: []string{"192.0.2.1"}},
		{name: "dual", ann: "192.0.2.1, 2001:db8::1", fams: both, want: []string{"192.0.2.1", "2001:db8::1"}},
		{name: "two of a family", ann: "192.0.2.1,192.0.2.2", fams: v4, err: "more than one"},
		{name: "family not served", ann: "2001:db8::1", fams: v4, err: "ipFamilies"},
		{name: "garbage", ann: "nope", fams: v4, err: "not an IP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := lb("s", withAnnotation(poolsource.AnnotationLoadBalancerIPs, tc.ann), func(s *v1.Service) { s.Spec.LoadBalancerIP = tc.spec })
			got, err := requestedIPs(s, tc.fams, []poolsource.API{poolsource.KCMSplit})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			var list []string
			for _, a := range got {
				list = append(list, a.String())
			}
			slices.Sort(list)
			if err != nil || !slices.Equal(list, tc.want) {
				t.Fatalf("got %v, %v; want %v", list, err, tc.want)
			}
		})
	}
}

func TestFamilies(t *testing.T) {
	s := lb("s")
	if f, need := families(s); !slices.Equal(f, []addrpool.Family{addrpool.IPv4}) || need != 1 {
		t.Fatalf("single stack: %v %d", f, need)
	}
	s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
	s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
	if f, need := families(s); !slices.Equal(f, []addrpool.Family{addrpool.IPv6, addrpool.IPv4}) || need != 1 {
		t.Fatalf("prefer: %v %d", f, need)
	}
	s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
	if _, need := families(s); need != 2 {
		t.Fatalf("require: need %d", need)
	}
}

func TestCandidatePools(t *testing.T) {
	infos := parseKCMSplit([]*v1alpha1.IPAddressPool{
		testobj.Pool("b-default", 1, []string{"10.0.1.0/24"}),
		testobj.Pool("a-default", 2, []string{"10.0.2.0/24"}),
		testobj.Pool("first", 3, []string{"10.0.3.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) { s.Priority = 0 }),
		testobj.Pool("last", 4, []string{"10.0.4.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) { s.Priority = 10 }),
		testobj.Pool("manual", 5, []string{"10.0.5.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) { s.AutoAssign = ptr.To(false) }),
		testobj.Pool("team-ns", 6, []string{"10.0.6.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) { s.Namespaces = []string{"team"} }),
		testobj.Pool("prod-ns", 7, []string{"10.0.7.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
		}),
		testobj.Pool("public-svc", 8, []string{"10.0.8.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) {
			s.ServiceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"exposure": "public"}}
		}),
		testobj.Pool("broken", 9, []string{"10.0.1.0/24"}), // overlaps b-default
	})
	svc := func(ns string, lbls map[string]string, ann map[string]string) *v1.Service {
		return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s", Labels: lbls, Annotations: ann}}
	}
	for _, tc := range []struct {
		name     string
		svc      *v1.Service
		nsLabels labels.Set
		want     []string
		err      string
	}{
		{name: "defaults by priority then name", svc: svc("default", nil, nil),
			want: []string{"a-default", "b-default", "first", "last"}},
		{name: "namespace list", svc: svc("team", nil, nil),
			want: []string{"a-default", "b-default", "first", "team-ns", "last"}},
		{name: "namespace selector", svc: svc("x", nil, nil), nsLabels: labels.Set{"env": "prod"},
			want: []string{"a-default", "b-default", "first", "prod-ns", "last"}},
		{name: "service selector", svc: svc("x", map[string]string{"exposure": "public"}, nil),
			want: []string{"a-default", "b-default", "first", "public-svc", "last"}},
		{name: "named pool ignores autoAssign", svc: svc("x", nil, map[string]string{poolsource.AnnotationAddressPool: "manual"}),
			want: []string{"manual"}},
		{name: "named pool must admit", svc: svc("x", nil, map[string]string{poolsource.AnnotationAddressPool: "team-ns"}),
			err: "does not admit"},
		{name: "named pool must exist", svc: svc("x", nil, map[string]string{poolsource.AnnotationAddressPool: "nope"}),
			err: "does not exist"},
		{name: "named pool must be valid", svc: svc("x", nil, map[string]string{poolsource.AnnotationAddressPool: "broken"}),
			err: "not valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := candidatePools(infos, tc.svc, tc.nsLabels, []poolsource.API{poolsource.KCMSplit})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
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
	got, err := candidatePools(s.pools, lb("web"), nil, s.apis)
	want := []string{"metallb.io/one", "metallb.io/two", "metallb.io/zero", "metallb.io/a-free", "metallb.io/b-free"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("candidates %v (%v), want %v", got, err, want)
	}
}

func TestMetalLBRequestedIPs(t *testing.T) {
	v4 := []addrpool.Family{addrpool.IPv4}
	apis := []poolsource.API{poolsource.MetalLB}
	both := lb("x", withAnnotation(poolsource.AnnotationMetalLBLoadBalancerIPs, "192.0.2.1"), func(s *v1.Service) { s.Spec.LoadBalancerIP = "192.0.2.2" })
	if _, err := requestedIPs(both, v4, apis); err == nil {
		t.Error("annotation and spec.loadBalancerIP together: no error")
	}
	legacy := lb("x", withAnnotation(poolsource.LegacyAnnotationMetalLBLBIPs, "192.0.2.3"))
	if got, err := requestedIPs(legacy, v4, apis); err != nil || got[addrpool.IPv4] != netip.MustParseAddr("192.0.2.3") {
		t.Errorf("legacy annotation: %v %v", got, err)
	}
	current := lb("x", withAnnotation(poolsource.AnnotationMetalLBLoadBalancerIPs, "192.0.2.4"), withAnnotation(poolsource.LegacyAnnotationMetalLBLBIPs, "192.0.2.3"))
	if got, _ := requestedIPs(current, v4, apis); got[addrpool.IPv4] != netip.MustParseAddr("192.0.2.4") {
		t.Errorf("current name must win: %v", got)
	}
	own := lb("x", withAnnotation(poolsource.AnnotationLoadBalancerIPs, "192.0.2.5"))
	if got, err := requestedIPs(own, v4, apis); err != nil || len(got) != 0 {
		t.Errorf("kcm-split's annotation read with --pool-api=metallb: %v %v", got, err)
	}
}
