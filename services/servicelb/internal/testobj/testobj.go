// Package testobj builds the LoadBalancer Services and the IPAddressPools the unit tests of the
// controller, of its allocation package and of its pool sources start from.
package testobj

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

// Namespace is the namespace of every Service LB builds.
const Namespace = "ns"

// Opt changes a Service LB builds.
type Opt func(*v1.Service)

// LB returns a single-stack IPv4 LoadBalancer Service named name in Namespace, with one TCP
// port 80, a selector app=name and a fixed creation time, changed by opts in order.
func LB(name string, opts ...Opt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name, ResourceVersion: "1", CreationTimestamp: metav1.NewTime(time.Unix(100, 0))},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeLoadBalancer,
			Ports:      []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Selector:   map[string]string{"app": name},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// WithAnnotation sets the annotation k to v.
func WithAnnotation(k, v string) Opt {
	return func(s *v1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

// Pool returns an IPAddressPool named name, created age seconds after the epoch, with addrs,
// its spec changed by mut in order.
func Pool(name string, age int64, addrs []string, mut ...func(*v1alpha1.IPAddressPoolSpec)) *v1alpha1.IPAddressPool {
	p := &v1alpha1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(age, 0))},
		Spec:       v1alpha1.IPAddressPoolSpec{Addresses: addrs},
	}
	for _, m := range mut {
		m(&p.Spec)
	}
	return p
}
