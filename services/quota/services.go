package quota

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

var serviceNames = []v1.ResourceName{
	"count/services",
	v1.ResourceServices,
	v1.ResourceServicesLoadBalancers,
	v1.ResourceServicesNodePorts,
}

// serviceTracks reports whether name is measured from Services.
func serviceTracks(name v1.ResourceName) bool { return slices.Contains(serviceNames, name) }

// serviceUsage returns the usage of one Service. A NodePort Service takes a node port per
// port; so does a LoadBalancer, unless it opted out of node ports, when only the ports that
// still carry one count.
func serviceUsage(svc *v1.Service) v1.ResourceList {
	one := *resource.NewQuantity(1, resource.DecimalSI)
	out := v1.ResourceList{
		"count/services":                 one,
		v1.ResourceServices:              one,
		v1.ResourceServicesLoadBalancers: *resource.NewQuantity(0, resource.DecimalSI),
		v1.ResourceServicesNodePorts:     *resource.NewQuantity(0, resource.DecimalSI),
	}
	switch svc.Spec.Type {
	case v1.ServiceTypeNodePort:
		out[v1.ResourceServicesNodePorts] = *resource.NewQuantity(int64(len(svc.Spec.Ports)), resource.DecimalSI)
	case v1.ServiceTypeLoadBalancer:
		ports := len(svc.Spec.Ports)
		if a := svc.Spec.AllocateLoadBalancerNodePorts; a != nil && !*a {
			ports = 0
			for _, p := range svc.Spec.Ports {
				if p.NodePort != 0 {
					ports++
				}
			}
		}
		out[v1.ResourceServicesNodePorts] = *resource.NewQuantity(int64(ports), resource.DecimalSI)
		out[v1.ResourceServicesLoadBalancers] = one
	}
	return out
}

// serviceUsageChanged reports whether an update changes the Service's usage (a type change,
// ports added or removed).
func serviceUsageChanged(old, cur *v1.Service) bool {
	return !equalUsage(serviceUsage(old), serviceUsage(cur))
}
