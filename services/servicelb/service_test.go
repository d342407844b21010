package servicelb

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
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
			s := lb("s", withAnnotation(AnnotationLoadBalancerIPs, tc.ann), func(s *v1.Service) { s.Spec.LoadBalancerIP = tc.spec })
			got, err := requestedIPs(s, tc.fams)
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

func TestSharedAddressInController(t *testing.T) {
	key := withAnnotation(AnnotationAllowSharedIP, "k")
	f := newFixture(t, testOptions(), lb("a", key, withPorts(80)), lb("b", key, withPorts(443)), lb("c", key, withPorts(80)),
		lb("local", key, withPorts(8080), func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }))
	f.pool("p", []string{"192.0.2.1-192.0.2.4"})
	f.c.restore(context.Background())
	got := map[string]string{}
	for _, n := range []string{"a", "b", "c", "local"} {
		if err := f.sync(n); err != nil {
			t.Fatal(err)
		}
		got[n] = strings.Join(ips(f.stored(n)), ",")
	}
	if got["a"] != got["b"] || got["a"] == got["c"] || got["local"] == got["a"] || got["local"] == got["c"] {
		t.Fatalf("addresses %v: want a and b shared, c (same port as a) and local (other policy) apart", got)
	}
	// A port change that conflicts moves the Service off the shared address.
	b := f.stored("b")
	b.Spec.Ports = []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}}
	f.cache(b)
	if err := f.sync("b"); err != nil {
		t.Fatal(err)
	}
	if now := strings.Join(ips(f.stored("b")), ","); now == got["a"] || now == got["c"] {
		t.Fatalf("b now on %s, shared with a Service on the same port", now)
	}
}
