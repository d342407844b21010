package quota

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestServiceUsage(t *testing.T) {
	svc := func(typ v1.ServiceType, ports int, mut ...func(*v1.Service)) *v1.Service {
		s := &v1.Service{Spec: v1.ServiceSpec{Type: typ}}
		for i := range ports {
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Port: int32(80 + i)})
		}
		for _, m := range mut {
			m(s)
		}
		return s
	}
	tests := []struct {
		name string
		svc  *v1.Service
		want map[string]string
	}{
		{"ClusterIP", svc(v1.ServiceTypeClusterIP, 2), map[string]string{"services": "1", "count/services": "1", "services.nodeports": "0", "services.loadbalancers": "0"}},
		{"NodePort", svc(v1.ServiceTypeNodePort, 3), map[string]string{"services.nodeports": "3", "services.loadbalancers": "0"}},
		{"LoadBalancer", svc(v1.ServiceTypeLoadBalancer, 2), map[string]string{"services.nodeports": "2", "services.loadbalancers": "1"}},
		{"LoadBalancer without node ports", svc(v1.ServiceTypeLoadBalancer, 3, func(s *v1.Service) {
			s.Spec.AllocateLoadBalancerNodePorts = new(false)
			s.Spec.Ports[1].NodePort = 30001
		}), map[string]string{"services.nodeports": "1", "services.loadbalancers": "1"}},
		{"ExternalName", svc(v1.ServiceTypeExternalName, 0), map[string]string{"services": "1", "services.nodeports": "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkUsage(t, serviceUsage(tt.svc), tt.want) })
	}
	if !serviceUsageChanged(svc(v1.ServiceTypeLoadBalancer, 1), svc(v1.ServiceTypeClusterIP, 1)) {
		t.Error("a type change must replenish")
	}
	if serviceUsageChanged(svc(v1.ServiceTypeClusterIP, 1), svc(v1.ServiceTypeClusterIP, 1, func(s *v1.Service) { s.Labels = map[string]string{"a": "b"} })) {
		t.Error("a label change must not replenish")
	}
}
