// What a Service asks for (families, addresses, a pool, sharing) and which pools may serve
// it, read from the Service and the pools alone.

package allocation

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
)

// PropsOf returns what decides whether svc may share an address.
func PropsOf(svc *v1.Service) addrpool.Props {
	p := addrpool.Props{
		SharingKey:    poolsource.SharingKey(svc),
		TrafficPolicy: string(svc.Spec.ExternalTrafficPolicy),
		Backends:      labels.Set(svc.Spec.Selector).String(),
	}
	if p.TrafficPolicy == "" {
		p.TrafficPolicy = string(v1.ServiceExternalTrafficPolicyCluster)
	}
	for _, sp := range svc.Spec.Ports {
		proto := string(sp.Protocol)
		if proto == "" {
			proto = string(v1.ProtocolTCP)
		}
		p.Ports = append(p.Ports, addrpool.Port{Protocol: proto, Port: sp.Port})
	}
	return p
}

// families returns the IP families svc should get addresses for, in its order, and how many
// of them it needs at least: all for RequireDualStack, one otherwise.
func families(svc *v1.Service) ([]addrpool.Family, int) {
	var out []addrpool.Family
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case v1.IPv4Protocol:
			out = append(out, addrpool.IPv4)
		case v1.IPv6Protocol:
			out = append(out, addrpool.IPv6)
		}
	}
	if len(out) == 0 {
		// The API server always sets ipFamilies; an object from elsewhere gets IPv4.
		out = []addrpool.Family{addrpool.IPv4}
	}
	need := 1
	if svc.Spec.IPFamilyPolicy != nil && *svc.Spec.IPFamilyPolicy == v1.IPFamilyPolicyRequireDualStack {
		need = len(out)
	}
	return out, need
}

// namedPool returns the key of the pool svc names by annotation, API by API in the order of
// apis, and the annotation; "" when it names none.
func namedPool(svc *v1.Service, apis []poolsource.API) (key, annotation string) {
	for _, api := range apis {
		if v, n, ok := poolsource.Annotation(svc, api.PoolAnnotations); ok && strings.TrimSpace(v) != "" {
			return api.Key(strings.TrimSpace(v)), n
		}
	}
	return "", ""
}

// requestedIPs returns the addresses svc asks for, by family, reading the annotations of
// the APIs in apis in their order, then spec.loadBalancerIP. An error means the request can
// never be met as written; as in MetalLB, a Service with both MetalLB's loadBalancerIPs
// annotation and spec.loadBalancerIP asks for nothing valid.
func requestedIPs(svc *v1.Service, fams []addrpool.Family, apis []poolsource.API) (map[addrpool.Family]netip.Addr, error) {
	for _, api := range apis {
		raw, name, ok := poolsource.Annotation(svc, api.IPsAnnotations)
		if !ok || strings.TrimSpace(raw) == "" {
			continue
		}
		if api.IPsExcludeSpecIP && strings.TrimSpace(svc.Spec.LoadBalancerIP) != "" {
			return nil, fmt.Errorf("annotation %s and spec.loadBalancerIP are both set; MetalLB's rules allow only one", name)
		}
		return parseRequested(svc, raw, "annotation "+name, fams)
	}
	if raw := svc.Spec.LoadBalancerIP; strings.TrimSpace(raw) != "" {
		return parseRequested(svc, raw, "spec.loadBalancerIP", fams)
	}
	return nil, nil
}

// parseRequested parses raw, a comma list of at most one address per family of fams, taken
// from source.
func parseRequested(svc *v1.Service, raw, source string, fams []addrpool.Family) (map[addrpool.Family]netip.Addr, error) {
	out := map[addrpool.Family]netip.Addr{}
	for _, s := range strings.Split(raw, ",") {
		a, err := addrpool.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		f := addrpool.FamilyOf(a)
		if _, dup := out[f]; dup {
			return nil, fmt.Errorf("%s: more than one %s address", source, f)
		}
		if !slices.Contains(fams, f) {
			return nil, fmt.Errorf("%s: %s is %s but the Service's ipFamilies are %v", source, a, f, svc.Spec.IPFamilies)
		}
		out[f] = a
	}
	return out, nil
}

// desiredIngress is the status for addrs, ordered as the Service's families.
func desiredIngress(addrs []netip.Addr, fams []addrpool.Family) []v1.LoadBalancerIngress {
	vip := v1.LoadBalancerIPModeVIP
	var out []v1.LoadBalancerIngress
	for _, f := range fams {
		for _, a := range addrs {
			if addrpool.FamilyOf(a) == f {
				out = append(out, v1.LoadBalancerIngress{IP: a.String(), IPMode: &vip})
			}
		}
	}
	return out
}

// IngressEqual compares what the controller writes: IP and IP mode, in order.
func IngressEqual(a, b []v1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y v1.LoadBalancerIngress) bool {
		return x.IP == y.IP && x.Hostname == y.Hostname && ptrEq(x.IPMode, y.IPMode) && len(x.Ports) == 0 && len(y.Ports) == 0
	})
}

func ptrEq[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// candidatePools returns, in order of preference, the pools svc may get an address from
// without asking for a specific one: the pool it names if any (autoAssign does not matter
// then), else every admitting pool with autoAssign, API by API in the order of apis (see
// autoPools). A named pool that does not exist or does not admit svc yields an error that
// says which.
func candidatePools(pools map[string]*poolsource.Pool, svc *v1.Service, nsLabels labels.Set, apis []poolsource.API) ([]string, error) {
	if want, annotation := namedPool(svc, apis); want != "" {
		p, ok := pools[want]
		switch {
		case !ok:
			return nil, fmt.Errorf("address pool %q (annotation %s) does not exist", want, annotation)
		case !p.Valid:
			return nil, fmt.Errorf("address pool %q (annotation %s) is not valid: %s", want, annotation, p.Message)
		case !p.Admits(svc, nsLabels):
			return nil, fmt.Errorf("address pool %q (annotation %s) does not admit this Service (namespaces or selectors)", want, annotation)
		}
		return []string{want}, nil
	}
	var names []string
	for _, api := range apis {
		names = append(names, autoPools(pools, svc, nsLabels, api.Name)...)
	}
	return names, nil
}

// autoPools returns the pools of api that svc may get an address from automatically, in
// the order of their Group, Priority (lower first) and key. kcm-split: by priority. MetalLB:
// first the pools whose serviceAllocation admits svc (by priority, a priority of 0 after
// every other), then those without serviceAllocation (MetalLB's controller takes them in
// map order; key order is a deterministic choice among its possible ones).
func autoPools(pools map[string]*poolsource.Pool, svc *v1.Service, nsLabels labels.Set, api string) []string {
	var out []*poolsource.Pool
	for _, p := range pools {
		if p.API == api && p.AutoAssign && p.Admits(svc, nsLabels) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *poolsource.Pool) int {
		if c := cmp.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	names := make([]string, len(out))
	for i, p := range out {
		names[i] = p.Key
	}
	return names
}

// admittingPools returns the keys of the pools that admit svc, whatever their autoAssign:
// where an explicitly requested address may come from.
func admittingPools(pools map[string]*poolsource.Pool, svc *v1.Service, nsLabels labels.Set) []string {
	var out []string
	for _, p := range pools {
		if p.Admits(svc, nsLabels) {
			out = append(out, p.Key)
		}
	}
	slices.Sort(out)
	return out
}
