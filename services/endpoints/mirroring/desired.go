package mirroring

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	endpointsliceutil "k8s.io/endpointslice/util"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/legacyip"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/subsets"
)

// The mirroring controller's arithmetic: what slices custom Endpoints come to, and which
// writes take the existing slices there. Pure functions of their arguments, no API calls.

// sliceKey is one slice's identity within an Endpoints' mirror: its address family and port
// set. Each key gets exactly one slice, as upstream.
type sliceKey struct {
	family discovery.AddressType
	ports  endpointsliceutil.PortMapKey
}

func sliceKeyOf(family discovery.AddressType, ports []discovery.EndpointPort) sliceKey {
	// NewPortMapKey sorts what it is given: never hand it a cached object's ports.
	return sliceKey{family: family, ports: endpointsliceutil.NewPortMapKey(slices.Clone(ports))}
}

// sliceContent is the desired content of the slice of one key.
type sliceContent struct {
	ports     []discovery.EndpointPort
	endpoints endpointsliceutil.EndpointSet
}

// desired is what an Endpoints object mirrors to.
type desired struct {
	byKey map[sliceKey]*sliceContent
	// invalid counts addresses that are not IPs; skipped counts every address left out,
	// invalid ones and those past the per-subset cap.
	invalid, skipped int
}

// desiredOf computes the slices' content from the Endpoints' subsets: after repacking,
// each subset contributes up to maxPerSubset addresses, ready ones first, to the key of its
// ports and each address's family. Addresses that do not parse as IPs are left out and do not
// count against the cap.
func desiredOf(ep *v1.Endpoints, maxPerSubset int) desired {
	d := desired{byKey: map[sliceKey]*sliceContent{}}
	for _, subset := range subsets.Repack(ep.Subsets) {
		ports := slicePorts(subset.Ports)
		keys := map[discovery.AddressType]sliceKey{}
		for _, family := range []discovery.AddressType{discovery.AddressTypeIPv4, discovery.AddressTypeIPv6} {
			k := sliceKeyOf(family, ports)
			keys[family] = k
			if _, ok := d.byKey[k]; !ok {
				d.byKey[k] = &sliceContent{ports: ports, endpoints: endpointsliceutil.EndpointSet{}}
			}
		}
		taken := 0
		add := func(addrs []v1.EndpointAddress, ready bool) {
			for i := range addrs {
				if taken >= maxPerSubset {
					return
				}
				e, family, ok := sliceEndpoint(&addrs[i], ready)
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

// slicePorts turns Endpoints ports into EndpointSlice ports, fresh copies.
func slicePorts(in []v1.EndpointPort) []discovery.EndpointPort {
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

// sliceEndpoint is the slice endpoint of one Endpoints address: its IP in canonical form
// (an IPv4-mapped IPv6 address counts as IPv4, and leading zeros are accepted as upstream's
// sloppy parser does), readiness, and the address's Pod reference, node and hostname.
func sliceEndpoint(a *v1.EndpointAddress, ready bool) (*discovery.Endpoint, discovery.AddressType, bool) {
	ip, ok := legacyip.Parse(a.IP)
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

// writePlan is the writes that take an Endpoints' mirrored slices to the desired state.
type writePlan struct {
	create, update, remove []*discovery.EndpointSlice
	// added, updated and removed count endpoints, for upstream's per-sync histograms.
	added, updated, removed int
	// endpointsPerSlice is the number of endpoints of each slice the Endpoints ends up with.
	endpointsPerSlice []int
}

// planWrites decides the writes for ep given its mirrored slices. Each key keeps one slice:
// the existing one that is already right if there is one, else the one sharing most endpoints
// with the desired set (the first by name on ties), rewritten; the others go. A slice that is
// right is never written. Slices created and deleted in the same family are merged into
// updates of the deleted ones, so a change of ports rewrites a slice instead of replacing it.
func planWrites(ep *v1.Endpoints, existing []*discovery.EndpointSlice, d desired, maxPerSubset int) writePlan {
	var p writePlan
	byKey := map[sliceKey][]*discovery.EndpointSlice{}
	for _, s := range existing {
		k := sliceKeyOf(s.AddressType, s.Ports)
		byKey[k] = append(byKey[k], s)
	}
	for _, k := range slices.SortedFunc(maps.Keys(byKey), compareSliceKeys) {
		if t, ok := d.byKey[k]; !ok || t.endpoints.Len() == 0 {
			for _, s := range byKey[k] {
				p.remove = append(p.remove, s)
				p.removed += len(s.Endpoints)
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(d.byKey), compareSliceKeys) {
		t := d.byKey[k]
		if t.endpoints.Len() == 0 {
			continue
		}
		p.endpointsPerSlice = append(p.endpointsPerSlice, min(t.endpoints.Len(), maxPerSubset))
		candidates := byKey[k]
		if len(candidates) == 0 {
			p.added += t.endpoints.Len()
			p.create = append(p.create, newSlice(ep, k.family, t, "", maxPerSubset))
			continue
		}
		keep, diff := pickSlice(ep, candidates, t)
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
		p.update = append(p.update, newSlice(ep, k.family, t, keep.Name, maxPerSubset))
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

func compareSliceKeys(a, b sliceKey) int {
	return cmp.Or(cmp.Compare(a.family, b.family), cmp.Compare(a.ports, b.ports))
}

// sliceDiff compares one existing slice with the desired content of its key.
type sliceDiff struct {
	added, updated, removed int
	upToDate                bool
}

func pickSlice(ep *v1.Endpoints, candidates []*discovery.EndpointSlice, t *sliceContent) (*discovery.EndpointSlice, sliceDiff) {
	sorted := slices.SortedFunc(slices.Values(candidates), func(a, b *discovery.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	var best *discovery.EndpointSlice
	var bestDiff sliceDiff
	bestShared := -1
	for _, s := range sorted {
		diff := diffSlice(ep, s, t)
		if diff.upToDate {
			return s, diff
		}
		if shared := len(s.Endpoints) - diff.removed; shared > bestShared {
			best, bestDiff, bestShared = s, diff, shared
		}
	}
	return best, bestDiff
}

// diffSlice tells how s differs from the desired content: endpoints added, changed
// and removed, and whether s needs no write at all (same endpoints, the Endpoints' labels and
// annotations, owned by this Endpoints object and not another of the same name).
func diffSlice(ep *v1.Endpoints, s *discovery.EndpointSlice, t *sliceContent) sliceDiff {
	var d sliceDiff
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

// newSlice builds the slice of one key: the Endpoints' labels plus the service-name
// and managed-by labels, its annotations, owned by it, named name or generated after it.
func newSlice(ep *v1.Endpoints, family discovery.AddressType, t *sliceContent, name string, maxPerSubset int) *discovery.EndpointSlice {
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
	s.Labels[discovery.LabelManagedBy] = ManagedBy
	if name == "" {
		s.GenerateName = generateNamePrefix(ep.Name)
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

// generateNamePrefix is the generateName of a new slice: the Endpoints' name and a dash when
// that makes a valid name prefix, the bare name otherwise.
func generateNamePrefix(name string) string {
	prefix := name + "-"
	if len(apivalidation.NameIsDNSSubdomain(prefix, true)) != 0 {
		return name
	}
	return prefix
}

// sliceName is a slice's name for logs and errors.
func sliceName(s *discovery.EndpointSlice) string {
	if s.Name != "" {
		return s.Name
	}
	return fmt.Sprintf("%s(generated)", s.GenerateName)
}
