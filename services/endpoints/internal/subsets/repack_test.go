package subsets

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
)

// Over 80 lines: one table of cases, each a few lines; splitting it would scatter the cases.
func TestRepackSubsets(t *testing.T) {
	a, b, c := testobj.Address("a", "10.1.0.1"), testobj.Address("b", "10.1.0.2"), testobj.Address("c", "10.1.0.3")
	p80, p81, p82 := testobj.Port("p80", 80), testobj.Port("p81", 81), testobj.Port("p82", 82)
	for _, tc := range []struct {
		name string
		in   []v1.EndpointSubset
		want []v1.EndpointSubset
	}{
		{name: "nil", in: nil, want: nil},
		{name: "empty subset is dropped", in: []v1.EndpointSubset{{Ports: []v1.EndpointPort{p80}}}, want: nil},
		{
			name: "one address per subset, same port: merged and sorted",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{b}, Ports: []v1.EndpointPort{p80}},
				{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{p80}},
			},
			want: []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{a, b}, Ports: []v1.EndpointPort{p80}}},
		},
		{
			name: "same addresses on two ports: one subset with both ports",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{p81}},
				{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{p80}},
			},
			want: []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{p80, p81}}},
		},
		{
			name: "different address sets stay apart, ordered by first port",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{a, b}, Ports: []v1.EndpointPort{p82}},
				{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{p81, p80}},
			},
			want: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{p80, p81}},
				{Addresses: []v1.EndpointAddress{a, b}, Ports: []v1.EndpointPort{p82}},
			},
		},
		{
			name: "readiness is part of the grouping",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{a}, NotReadyAddresses: []v1.EndpointAddress{b}, Ports: []v1.EndpointPort{p80}},
				{Addresses: []v1.EndpointAddress{a, b}, Ports: []v1.EndpointPort{p81}},
			},
			want: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{a}, NotReadyAddresses: []v1.EndpointAddress{b}, Ports: []v1.EndpointPort{p80}},
				{Addresses: []v1.EndpointAddress{a, b}, Ports: []v1.EndpointPort{p81}},
			},
		},
		{
			name: "not ready wins over ready for one port",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{p80}},
				{NotReadyAddresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{p80}},
				{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{p80}},
			},
			want: []v1.EndpointSubset{{NotReadyAddresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{p80}}},
		},
		{
			name: "duplicates merge",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{c, a, c}, Ports: []v1.EndpointPort{p80, p80}},
			},
			want: []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{a, c}, Ports: []v1.EndpointPort{p80}}},
		},
		{
			name: "same IP, different pods stay distinct",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{testobj.Address("y", "10.1.0.1"), testobj.Address("x", "10.1.0.1")}, Ports: []v1.EndpointPort{p80}},
			},
			want: []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{testobj.Address("x", "10.1.0.1"), testobj.Address("y", "10.1.0.1")}, Ports: []v1.EndpointPort{p80}}},
		},
		{
			name: "address without a pod sorts first among equal IPs",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{a, {IP: "10.1.0.1"}}, Ports: []v1.EndpointPort{p80}},
			},
			want: []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{{IP: "10.1.0.1"}, a}, Ports: []v1.EndpointPort{p80}}},
		},
		{
			name: "address-only subsets",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{b}},
				{NotReadyAddresses: []v1.EndpointAddress{a}},
			},
			want: []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{b}, NotReadyAddresses: []v1.EndpointAddress{a}}},
		},
		{
			name: "ports differing only in appProtocol are different ports",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{{Name: "p", Port: 80, Protocol: v1.ProtocolTCP, AppProtocol: new("h2c")}}},
				{Addresses: []v1.EndpointAddress{b}, Ports: []v1.EndpointPort{{Name: "p", Port: 80, Protocol: v1.ProtocolTCP}}},
			},
			want: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{b}, Ports: []v1.EndpointPort{{Name: "p", Port: 80, Protocol: v1.ProtocolTCP}}},
				{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{{Name: "p", Port: 80, Protocol: v1.ProtocolTCP, AppProtocol: new("h2c")}}},
			},
		},
		{
			name: "equal appProtocol values in different pointers are one port",
			in: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{a}, Ports: []v1.EndpointPort{{Port: 80, Protocol: v1.ProtocolTCP, AppProtocol: new("h2c")}}},
				{Addresses: []v1.EndpointAddress{b}, Ports: []v1.EndpointPort{{Port: 80, Protocol: v1.ProtocolTCP, AppProtocol: new("h2c")}}},
			},
			want: []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{a, b}, Ports: []v1.EndpointPort{{Port: 80, Protocol: v1.ProtocolTCP, AppProtocol: new("h2c")}}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Repack(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("repack (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(got, Repack(got)); diff != "" {
				t.Errorf("repack is not idempotent (-once +twice):\n%s", diff)
			}
		})
	}
}

// The canonical form must not depend on input order: that is what lets a sync recognise
// Endpoints written by another writer (or another version) as already up to date.
func TestRepackSubsetsIgnoresInputOrder(t *testing.T) {
	var in []v1.EndpointSubset
	for i, name := range []string{"a", "b", "c", "d", "e", "f"} {
		ip := "10.1.0." + string(rune('1'+i))
		s := v1.EndpointSubset{Ports: []v1.EndpointPort{testobj.Port("p80", 80)}}
		if i%2 == 0 {
			s.Addresses = []v1.EndpointAddress{testobj.Address(name, ip)}
			s.Ports = append(s.Ports, testobj.Port("p81", 81))
		} else {
			s.NotReadyAddresses = []v1.EndpointAddress{testobj.Address(name, ip)}
		}
		in = append(in, s)
	}
	want := Repack(in)
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		shuffled := append([]v1.EndpointSubset(nil), in...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if diff := cmp.Diff(want, Repack(shuffled)); diff != "" {
			t.Fatalf("order-dependent result (-want +got):\n%s", diff)
		}
	}
}

func TestRepackSubsetsLeavesInputAlone(t *testing.T) {
	in := []v1.EndpointSubset{
		{Addresses: []v1.EndpointAddress{testobj.Address("b", "10.1.0.2"), testobj.Address("a", "10.1.0.1")}, Ports: []v1.EndpointPort{testobj.Port("p81", 81), testobj.Port("p80", 80)}},
	}
	before := cloneSubsets(in)
	out := Repack(in)
	if diff := cmp.Diff(before, in); diff != "" {
		t.Fatalf("input modified (-before +after):\n%s", diff)
	}
	out[0].Addresses[0].TargetRef.Name = "changed"
	*out[0].Addresses[0].NodeName = "changed"
	if diff := cmp.Diff(before, in); diff != "" {
		t.Fatalf("output shares memory with input (-before +after):\n%s", diff)
	}
}

func cloneSubsets(in []v1.EndpointSubset) []v1.EndpointSubset {
	out := make([]v1.EndpointSubset, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
