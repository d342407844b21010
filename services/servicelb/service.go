// What the controller reads of a Service: whether it is this controller's, its finalizer, the
// addresses its status shows.

package servicelb

import (
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
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

func containsAddr(as []netip.Addr, a netip.Addr) bool { return slices.Contains(as, a) }
