// Keep or release: whether a Service may keep an address it holds, and why not.

package allocation

import (
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
)

// keepOrRelease says whether svc may keep a. An empty why keeps it, verified. A why with
// release=false keeps it although it cannot be verified now (the pools are unknown, or the
// pool it came from was deleted or is invalid): clearing it on such a guess would take a
// working address away. A why with release=true is a verified reason to give it back: the
// Service changed, or a valid, synced pool no longer covers the address or admits the
// Service.
func (s *State) keepOrRelease(svc *v1.Service, a netip.Addr, fams []addrpool.Family, requested map[addrpool.Family]netip.Addr, reqErr error, candidates []string, known bool, nsLabels labels.Set) (why string, release bool) {
	f := addrpool.FamilyOf(a)
	if !slices.Contains(fams, f) {
		return fmt.Sprintf("the Service no longer has IP family %s", f), true
	}
	want, wanted := requested[f]
	if reqErr == nil && wanted && want != a {
		return fmt.Sprintf("the Service asks for %s", want), true
	}
	if !known {
		return "the IPAddressPool API is not available or not synced", false
	}
	if name, _ := namedPool(svc, s.apis); name != "" {
		return s.keepInNamedPool(svc, a, name, nsLabels)
	}
	admitting := s.admittingPoolsContaining(svc, a, nsLabels)
	if len(admitting) > 0 {
		s.origin[a] = admitting[0]
		if reqErr == nil && wanted {
			return "", false
		}
		for _, name := range candidates {
			if slices.Contains(admitting, name) {
				return "", false
			}
		}
		if len(candidates) == 0 {
			// Held from a pool the Service may still use but that no longer
			// auto-assigns: keeping it is less disruptive than moving it.
			return "", false
		}
		return fmt.Sprintf("pool %s no longer assigns it automatically and others do", admitting[0]), true
	}
	if p := s.validPoolContaining(a); p != "" {
		s.origin[a] = p
		return fmt.Sprintf("pool %s does not admit this Service", p), true
	}
	origin := s.origin[a]
	if origin == "" {
		return "no pool is known to have contained it", false
	}
	p := s.pools[origin]
	switch {
	case p == nil:
		return fmt.Sprintf("its pool %s was deleted", origin), false
	case !p.Valid:
		return fmt.Sprintf("its pool %s is not valid: %s", origin, p.Message), false
	}
	return fmt.Sprintf("pool %s no longer contains it", origin), true
}

// keepInNamedPool is keepOrRelease for a Service that names pool name.
func (s *State) keepInNamedPool(svc *v1.Service, a netip.Addr, name string, nsLabels labels.Set) (why string, release bool) {
	p := s.pools[name]
	switch {
	case p == nil:
		return fmt.Sprintf("pool %s named by the Service does not exist", name), false
	case !p.Valid:
		return fmt.Sprintf("pool %s named by the Service is not valid", name), false
	}
	if r, ok := s.alloc.Pool(name); !ok || !r.Contains(a) {
		return fmt.Sprintf("the Service asks for pool %s, which does not contain it", name), true
	}
	if !p.Admits(svc, nsLabels) {
		return fmt.Sprintf("pool %s does not admit this Service", name), true
	}
	s.origin[a] = name
	return "", false
}

// admittingPoolsContaining returns the valid pools admitting svc that contain a.
func (s *State) admittingPoolsContaining(svc *v1.Service, a netip.Addr, nsLabels labels.Set) []string {
	var out []string
	for _, name := range admittingPools(s.pools, svc, nsLabels) {
		if p, ok := s.alloc.Pool(name); ok && p.Contains(a) {
			out = append(out, name)
		}
	}
	return out
}
