package endpoints

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// The mirroring controller's arithmetic: what slices custom Endpoints come to, and which
// writes take the existing slices there. Pure functions of their arguments, no API calls.

// mirrorKey is one slice's identity within an Endpoints' mirror: its address family and port
// set. Each key gets exactly one slice, as upstream.
type mirrorKey struct {
	family discovery.AddressType
	ports  endpointsliceutil.PortMapKey
}

func mirrorKeyOf(family discovery.AddressType, ports []discovery.EndpointPort) mirrorKey {
	// NewPortMapKey sorts what it is given: never hand it a cached object's ports.
	return mirrorKey{family: family, ports: endpointsliceutil.NewPortMapKey(slices.Clone(ports))}
}

// mirrorTarget is the desired content of the slice of one key.
type mirrorTarget struct {
	ports     []discovery.EndpointPort
	endpoints endpointsliceutil.EndpointSet
}

// mirrorDesired is what an Endpoints object mirrors to.
type mirrorDesired struct {
	byKey map[mirrorKey]*mirrorTarget
	// invalid counts addresses that are not IPs; skipped counts every address left out,
	// invalid ones and those past the per-subset cap.
	invalid, skipped int
}

// desiredMirror computes the slices' content from the Endpoints' subsets: after repacking,
// each subset contributes up to maxPerSubset addresses, ready ones first, to the key of its
// ports and each address's family. Addresses that do not parse as IPs are left out and do not
// count against the cap.
func desiredMirror(ep *v1.Endpoints, maxPerSubset int) mirrorDesired {
	d := mirrorDesired{byKey: map[mirrorKey]*mirrorTarget{}}
	for _, subset := range repackSubsets(ep.Subsets) {
		ports := mirrorPorts(subset.Ports)
		keys := map[discovery.AddressType]mirrorKey{}
		for _, family := range []discovery.AddressType{discovery.AddressTypeIPv4, discovery.AddressTypeIPv6} {
			k := mirrorKeyOf(family, ports)
			keys[family] = k
			if _, ok := d.byKey[k]; !ok {
				d.byKey[k] = &mirrorTarget{ports: ports, endpoints: endpointsliceutil.EndpointSet{}}
			}
		}
		taken := 0
		add := func(addrs []v1.EndpointAddress, ready bool) {
			for i := range addrs {
				if taken >= maxPerSubset {
					return
				}
				e, family, ok := mirrorEndpoint(&addrs[i], ready)
				if !ok {
					d.invalid++
					continue
				}
				d.byKey[keys[family]].endpoints.Insert(e)
				taken++
			}
		}
		add(subset.Addresses, true)
		add(subset.NotReadyAddresses, false)
		d.skipped += len(subset.Addresses) + len(subset.NotReadyAddresses) - taken
	}
	return d
}

// mirrorPorts turns Endpoints ports into EndpointSlice ports, fresh copies.
func mirrorPorts(in []v1.EndpointPort) []discovery.EndpointPort {
	out := make([]discovery.EndpointPort, 0, len(in))
	for _, p := range in {
		out = append(out, discovery.EndpointPort{
			Name:        new(p.Name),
			Port:        new(p.Port),
			Protocol:    new(p.Protocol),
			AppProtocol: cloneString(p.AppProtocol),
		})
	}
	return out
}

func cloneString(s *string) *string {
	if s == nil {
		return nil
	}
	return new(*s)
}

// mirrorEndpoint is the slice endpoint of one Endpoints address: its IP in canonical form
// (an IPv4-mapped IPv6 address counts as IPv4, and leading zeros are accepted as upstream's
// sloppy parser does), readiness, and the address's Pod reference, node and hostname.
func mirrorEndpoint(a *v1.EndpointAddress, ready bool) (*discovery.Endpoint, discovery.AddressType, bool) {
	ip, ok := parseIPSloppy(a.IP)
	if !ok {
		return nil, "", false
	}
	family := discovery.AddressTypeIPv4
	if !ip.Is4() {
		family = discovery.AddressTypeIPv6
	}
	e := &discovery.Endpoint{
		Addresses:  []string{ip.String()},
		Conditions: discovery.EndpointConditions{Ready: new(ready)},
	}
	if a.TargetRef != nil {
		e.TargetRef = a.TargetRef.DeepCopy()
	}
	if a.NodeName != nil {
		e.NodeName = new(*a.NodeName)
	}
	if a.Hostname != "" {
		e.Hostname = new(a.Hostname)
	}
	return e, family, true
}

// parseIPSloppy parses an IP as Go's net.ParseIP did before Go 1.17 (and upstream still
// does): IPv4 octets may have leading zeros, read as decimal. IPv4-mapped IPv6 addresses are
// IPv4.
func parseIPSloppy(s string) (netip.Addr, bool) {
	if ip, err := netip.ParseAddr(s); err == nil {
		if ip.Zone() != "" {
			return netip.Addr{}, false
		}
		return ip.Unmap(), true
	}
	// Leading zeros: four dotted decimal octets of up to 3 digits each.
	var octets [4]byte
	n, val, digits := 0, 0, 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if digits == 0 || val > 255 || n >= 4 {
				return netip.Addr{}, false
			}
			octets[n] = byte(val)
			n, val, digits = n+1, 0, 0
			continue
		}
		if s[i] < '0' || s[i] > '9' || digits >= 3 {
			return netip.Addr{}, false
		}
		val = val*10 + int(s[i]-'0')
		digits++
	}
	if n != 4 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(octets), true
}

// mirrorPlan is the writes that take an Endpoints' mirrored slices to the desired state.
type mirrorPlan struct {
	create, update, remove []*discovery.EndpointSlice
	// added, updated and removed count endpoints, for upstream's per-sync histograms.
	added, updated, removed int
	// endpointsPerSlice is the number of endpoints of each slice the Endpoints ends up with.
	endpointsPerSlice []int
}

// planMirror decides the writes for ep given its mirrored slices. Each key keeps one slice:
// the existing one that is already right if there is one, else the one sharing most endpoints
// with the desired set (the first by name on ties), rewritten; the others go. A slice that is
// right is never written. Slices created and deleted in the same family are merged into
// updates of the deleted ones, so a change of ports rewrites a slice instead of replacing it.
func planMirror(ep *v1.Endpoints, existing []*discovery.EndpointSlice, d mirrorDesired, maxPerSubset int) mirrorPlan {
	var p mirrorPlan
	byKey := map[mirrorKey][]*discovery.EndpointSlice{}
	for _, s := range existing {
		k := mirrorKeyOf(s.AddressType, s.Ports)
		byKey[k] = append(byKey[k], s)
	}
	for _, k := range slices.SortedFunc(maps.Keys(byKey), compareMirrorKeys) {
		if t, ok := d.byKey[k]; !ok || t.endpoints.Len() == 0 {
			for _, s := range byKey[k] {
				p.remove = append(p.remove, s)
				p.removed += len(s.Endpoints)
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(d.byKey), compareMirrorKeys) {
		t := d.byKey[k]
		if t.endpoints.Len() == 0 {
			continue
		}
		p.endpointsPerSlice = append(p.endpointsPerSlice, min(t.endpoints.Len(), maxPerSubset))
		candidates := byKey[k]
		if len(candidates) == 0 {
			p.added += t.endpoints.Len()
			p.create = append(p.create, newMirrorSlice(ep, k.family, t, "", maxPerSubset))
			continue
		}
		keep, diff := pickMirrorSlice(ep, candidates, t)
		for _, s := range candidates {
			if s != keep {
				p.remove = append(p.remove, s)
			}
		}
		p.added += diff.added
		p.updated += diff.updated
		p.removed += diff.removed
		if diff.upToDate {
			continue
		}
		p.update = append(p.update, newMirrorSlice(ep, k.family, t, keep.Name, maxPerSubset))
	}
	// Reuse slices about to be deleted for slices about to be created, family by family.
	var create []*discovery.EndpointSlice
	for _, c := range p.create {
		i := slices.IndexFunc(p.remove, func(s *discovery.EndpointSlice) bool { return s.AddressType == c.AddressType })
		if i < 0 {
			create = append(create, c)
			continue
		}
		c.Name, c.GenerateName = p.remove[i].Name, ""
		p.update = append(p.update, c)
		p.remove = slices.Delete(p.remove, i, i+1)
	}
	p.create = create
	return p
}

func compareMirrorKeys(a, b mirrorKey) int {
	return cmp.Or(cmp.Compare(a.family, b.family), cmp.Compare(a.ports, b.ports))
}

// mirrorDiff compares one existing slice with the desired content of its key.
type mirrorDiff struct {
	added, updated, removed int
	upToDate                bool
}

func pickMirrorSlice(ep *v1.Endpoints, candidates []*discovery.EndpointSlice, t *mirrorTarget) (*discovery.EndpointSlice, mirrorDiff) {
	sorted := slices.SortedFunc(slices.Values(candidates), func(a, b *discovery.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	var best *discovery.EndpointSlice
	var bestDiff mirrorDiff
	bestShared := -1
	for _, s := range sorted {
		diff := diffMirrorSlice(ep, s, t)
		if diff.upToDate {
			return s, diff
		}
		if shared := len(s.Endpoints) - diff.removed; shared > bestShared {
			best, bestDiff, bestShared = s, diff, shared
		}
	}
	return best, bestDiff
}

// diffMirrorSlice tells how s differs from the desired content: endpoints added, changed
// and removed, and whether s needs no write at all (same endpoints, the Endpoints' labels and
// annotations, owned by this Endpoints object and not another of the same name).
func diffMirrorSlice(ep *v1.Endpoints, s *discovery.EndpointSlice, t *mirrorTarget) mirrorDiff {
	var d mirrorDiff
	matched := 0
	for i := range s.Endpoints {
		e := s.Endpoints[i]
		e.Addresses = slices.Clone(e.Addresses) // hashing sorts them in place
		want := t.endpoints.Get(&e)
		switch {
		case want == nil:
			d.removed++
		case !endpointsliceutil.EndpointsEqualBeyondHash(want, &e):
			matched++
			d.updated++
		default:
			matched++
		}
	}
	d.added = t.endpoints.Len() - matched
	d.upToDate = d.added == 0 && d.updated == 0 && d.removed == 0 &&
		apiequality.Semantic.DeepEqual(ep.Labels, withoutKeys(s.Labels, discovery.LabelManagedBy, discovery.LabelServiceName)) &&
		apiequality.Semantic.DeepEqual(mirroredAnnotations(ep.Annotations), s.Annotations) &&
		!ownedByOtherEndpoints(ep, s)
	return d
}

// ownedByOtherEndpoints reports a slice owned by an earlier Endpoints object of the same
// name: it must be rewritten with the current owner, or the garbage collector removes it.
func ownedByOtherEndpoints(ep *v1.Endpoints, s *discovery.EndpointSlice) bool {
	for _, o := range s.OwnerReferences {
		if o.Kind == "Endpoints" && o.Name == ep.Name && o.UID != ep.UID {
			return true
		}
	}
	return false
}

// mirroredAnnotations are the Endpoints' annotations a slice carries: all but the trigger
// time (slices of custom Endpoints have none) and kubectl's last applied configuration.
func mirroredAnnotations(in map[string]string) map[string]string {
	return withoutKeys(in, v1.EndpointsLastChangeTriggerTime, v1.LastAppliedConfigAnnotation)
}

// withoutKeys returns a copy of m without keys; empty when nothing is left.
func withoutKeys(m map[string]string, keys ...string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

// newMirrorSlice builds the slice of one key: the Endpoints' labels plus the service-name
// and managed-by labels, its annotations, owned by it, named name or generated after it.
func newMirrorSlice(ep *v1.Endpoints, family discovery.AddressType, t *mirrorTarget, name string, maxPerSubset int) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       ep.Namespace,
			Name:            name,
			Labels:          withoutKeys(ep.Labels),
			Annotations:     mirroredAnnotations(ep.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ep, v1.SchemeGroupVersion.WithKind("Endpoints"))},
		},
		AddressType: family,
		Ports:       t.ports,
		Endpoints:   make([]discovery.Endpoint, 0, t.endpoints.Len()),
	}
	s.Labels[discovery.LabelServiceName] = ep.Name
	s.Labels[discovery.LabelManagedBy] = MirrorManagedBy
	if name == "" {
		s.GenerateName = mirrorSlicePrefix(ep.Name)
	}
	all := t.endpoints.UnsortedList()
	// A stable order: the same Endpoints makes the same slice, byte for byte.
	slices.SortFunc(all, func(a, b *discovery.Endpoint) int {
		return cmp.Or(cmp.Compare(a.Addresses[0], b.Addresses[0]), cmp.Compare(targetName(a), targetName(b)))
	})
	for _, e := range all[:min(len(all), maxPerSubset)] {
		s.Endpoints = append(s.Endpoints, *e)
	}
	return s
}

func targetName(e *discovery.Endpoint) string {
	if e.TargetRef == nil {
		return ""
	}
	return e.TargetRef.Namespace + "/" + e.TargetRef.Name
}

// mirrorSlicePrefix is the generateName of a new slice: the Endpoints' name and a dash when
// that makes a valid name prefix, the bare name otherwise.
func mirrorSlicePrefix(name string) string {
	prefix := name + "-"
	if len(apivalidation.NameIsDNSSubdomain(prefix, true)) != 0 {
		return name
	}
	return prefix
}

// mirrorSliceName is a slice's name for logs and errors.
func mirrorSliceName(s *discovery.EndpointSlice) string {
	if s.Name != "" {
		return s.Name
	}
	return fmt.Sprintf("%s(generated)", s.GenerateName)
}
