package servicelb

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
)

// Annotations a Service may carry to steer allocation.
const (
	// AnnotationAddressPool names the IPAddressPool to allocate from (autoAssign ignored).
	AnnotationAddressPool = "lb.kcm-split.io/address-pool"
	// AnnotationLoadBalancerIPs requests specific addresses, comma-separated, at most one per
	// family. spec.loadBalancerIP (deprecated upstream) is honoured when this is absent.
	AnnotationLoadBalancerIPs = "lb.kcm-split.io/load-balancer-ips"
	// AnnotationAllowSharedIP is the sharing key: Services with the same key, no port in
	// common and compatible externalTrafficPolicy may get the same address.
	AnnotationAllowSharedIP = "lb.kcm-split.io/allow-shared-ip"
)

// FinalizerLoadBalancerCleanup is upstream's finalizer: the Service is not removed before its
// address has been released.
const FinalizerLoadBalancerCleanup = "service.kubernetes.io/load-balancer-cleanup"

// handles reports whether svc's load balancer is this controller's business: a LoadBalancer
// Service of our class (no class when the controller has none).
func handles(svc *v1.Service, class string) bool {
	if svc.Spec.Type != v1.ServiceTypeLoadBalancer {
		return false
	}
	if svc.Spec.LoadBalancerClass == nil {
		return class == ""
	}
	return *svc.Spec.LoadBalancerClass == class
}

func hasFinalizer(svc *v1.Service) bool {
	return slices.Contains(svc.Finalizers, FinalizerLoadBalancerCleanup)
}

// propsOf returns what decides whether svc may share an address.
func propsOf(svc *v1.Service) addrpool.Props {
	p := addrpool.Props{
		SharingKey:    sharingKey(svc),
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

// requestedIPs is requestedIPsFor with the project's own pool API only: the annotation, else
// spec.loadBalancerIP. An error means the request can never be met as written.
func requestedIPs(svc *v1.Service, fams []addrpool.Family) (map[addrpool.Family]netip.Addr, error) {
	return requestedIPsFor(svc, fams, []string{PoolAPIKCMSplit})
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

// ingressEqual compares what this controller writes: IP and IP mode, in order.
func ingressEqual(a, b []v1.LoadBalancerIngress) bool {
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

// statusAddrs parses the IPs in svc's status; hostnames and garbage are skipped.
func statusAddrs(svc *v1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := addrpool.ParseAddr(in.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}
