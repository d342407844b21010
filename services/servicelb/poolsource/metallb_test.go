package poolsource

import (
	"testing"

	mlb "go.universe.tf/metallb/api/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestMetalLBAdmits(t *testing.T) {
	sel := func(k, v string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	pi := ParseMetalLB(metal("p", &mlb.ServiceAllocation{
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
		if got := pi.Admits(tc.svc, tc.ns); got != tc.want {
			t.Errorf("%s: admits %v, want %v", tc.name, got, tc.want)
		}
	}
}

func metal(name string, sa *mlb.ServiceAllocation, addrs ...string) *mlb.IPAddressPool {
	return &mlb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: mlb.IPAddressPoolSpec{Addresses: addrs, AllocateTo: sa}}
}

const testNS = "ns"

type svcOpt func(*v1.Service)

func lb(name string, opts ...svcOpt) *v1.Service {
	s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer}}
	for _, o := range opts {
		o(s)
	}
	return s
}
