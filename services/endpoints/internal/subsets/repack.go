// Package subsets holds the canonical form of core/v1 Endpoints subsets (Repack). Two
// controllers read subsets and must agree on what they mean: the Endpoints controller writes
// its Endpoints in this form and compares with it, so that content written in another order
// or grouping is recognised as the same; the mirroring controller mirrors the same form, so
// that an address listed twice, or ready on one port and not on another, becomes the same
// slice endpoint both would describe.
package subsets

import (
	"cmp"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// addressKey identifies an address across subsets. The UID is part of it because two Pods
// may share an IP (host-network Pods on one node) and must stay distinct.
type addressKey struct {
	ip  string
	uid types.UID
}

func keyOf(a *v1.EndpointAddress) addressKey {
	k := addressKey{ip: a.IP}
	if a.TargetRef != nil {
		k.uid = a.TargetRef.UID
	}
	return k
}

// portKey is an EndpointPort by value (EndpointPort itself holds a pointer, so it compares
// by identity, not content).
type portKey struct {
	name     string
	port     int32
	protocol v1.Protocol
	app      string
	hasApp   bool
}

// noPort is the port number of the key that stands for "this subset has no ports" (headless
// Services without ports). Valid ports are 1-65535, so it cannot collide with a real one.
const noPort = -1

func portKeyOf(p *v1.EndpointPort) portKey {
	k := portKey{name: p.Name, port: p.Port, protocol: p.Protocol}
	if p.AppProtocol != nil {
		k.app, k.hasApp = *p.AppProtocol, true
	}
	return k
}

// Repack returns subsets in canonical form: every address offered on exactly the same
// set of ports (with the same readiness on each) shares one subset; addresses, ports and
// subsets are sorted; duplicates are merged and subsets left without addresses are dropped.
// Two inputs describing the same (address, port, readiness) triples repack to identical
// output, which is what makes comparing desired and current Endpoints meaningful.
//
// An address listed as both ready and not ready for one port counts as not ready: it is
// safer to withhold traffic than to send it to a Pod that may refuse it. When an address
// appears more than once with differing details (hostname, nodeName), the first one wins.
//
// The input is not modified and the output shares no memory with it.
func Repack(in []v1.EndpointSubset) []v1.EndpointSubset {
	t := collect(in)
	// Group the ports by who serves them, and how.
	type group struct {
		members map[addressKey]bool
		ports   []v1.EndpointPort
	}
	groups := map[string]*group{}
	for pk, m := range t.members {
		sig := signature(m)
		g := groups[sig]
		if g == nil {
			g = &group{members: m}
			groups[sig] = g
		}
		if pk.port != noPort {
			g.ports = append(g.ports, t.ports[pk])
		}
	}

	if len(groups) == 0 {
		return nil
	}
	out := make([]v1.EndpointSubset, 0, len(groups))
	for _, g := range groups {
		var s v1.EndpointSubset
		for ak, ready := range g.members {
			if ready {
				s.Addresses = append(s.Addresses, *t.addrs[ak])
			} else {
				s.NotReadyAddresses = append(s.NotReadyAddresses, *t.addrs[ak])
			}
		}
		slices.SortFunc(s.Addresses, compareAddresses)
		slices.SortFunc(s.NotReadyAddresses, compareAddresses)
		slices.SortFunc(g.ports, comparePorts)
		s.Ports = g.ports
		out = append(out, s)
	}
	// Every port belongs to exactly one subset and at most one subset has no ports, so the
	// first port orders subsets totally.
	slices.SortFunc(out, func(a, b v1.EndpointSubset) int {
		if len(a.Ports) == 0 || len(b.Ports) == 0 {
			return cmp.Compare(len(a.Ports), len(b.Ports))
		}
		return comparePorts(a.Ports[0], b.Ports[0])
	})
	return out
}

// triples are the (address, port, readiness) triples of some subsets, each address and port
// held once.
type triples struct {
	addrs map[addressKey]*v1.EndpointAddress
	ports map[portKey]v1.EndpointPort
	// readiness of each address, per port
	members map[portKey]map[addressKey]bool
}

// collect returns the triples of in, deep copies of its addresses and ports.
func collect(in []v1.EndpointSubset) *triples {
	t := &triples{
		addrs:   map[addressKey]*v1.EndpointAddress{},
		ports:   map[portKey]v1.EndpointPort{},
		members: map[portKey]map[addressKey]bool{},
	}
	for i := range in {
		s := &in[i]
		var keys []portKey
		if len(s.Ports) == 0 {
			keys = append(keys, portKey{port: noPort})
		} else {
			for j := range s.Ports {
				pk := portKeyOf(&s.Ports[j])
				if _, ok := t.ports[pk]; !ok {
					t.ports[pk] = *s.Ports[j].DeepCopy()
				}
				keys = append(keys, pk)
			}
		}
		for _, pk := range keys {
			for j := range s.Addresses {
				t.note(pk, &s.Addresses[j], true)
			}
			for j := range s.NotReadyAddresses {
				t.note(pk, &s.NotReadyAddresses[j], false)
			}
		}
	}
	return t
}

// note adds address a on port pk; not ready wins over ready.
func (t *triples) note(pk portKey, a *v1.EndpointAddress, ready bool) {
	ak := keyOf(a)
	if _, ok := t.addrs[ak]; !ok {
		t.addrs[ak] = a.DeepCopy()
	}
	m := t.members[pk]
	if m == nil {
		m = map[addressKey]bool{}
		t.members[pk] = m
	}
	if was, seen := m[ak]; !seen || was {
		m[ak] = ready
	}
}

// signature is a string naming a set of (address, readiness) pairs, used as a map key.
func signature(m map[addressKey]bool) string {
	keys := make([]addressKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareAddressKeys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k.ip)
		b.WriteByte(0)
		b.WriteString(string(k.uid))
		if m[k] {
			b.WriteString("\x00r\x01")
		} else {
			b.WriteString("\x00n\x01")
		}
	}
	return b.String()
}

func compareAddressKeys(a, b addressKey) int {
	if c := strings.Compare(a.ip, b.ip); c != 0 {
		return c
	}
	return strings.Compare(string(a.uid), string(b.uid))
}

// compareAddresses orders by IP, then by Pod UID (an address without a Pod first).
func compareAddresses(a, b v1.EndpointAddress) int {
	return compareAddressKeys(keyOf(&a), keyOf(&b))
}

// comparePorts orders by number, then protocol, name and appProtocol.
func comparePorts(a, b v1.EndpointPort) int {
	ka, kb := portKeyOf(&a), portKeyOf(&b)
	return cmp.Or(
		cmp.Compare(ka.port, kb.port),
		strings.Compare(string(ka.protocol), string(kb.protocol)),
		strings.Compare(ka.name, kb.name),
		compareBool(ka.hasApp, kb.hasApp),
		strings.Compare(ka.app, kb.app),
	)
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
