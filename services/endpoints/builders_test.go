package endpoints

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Small builders shared by the tests. Each takes optional mutators so a case states only
// what matters to it.

const testNS = "ns"

var testCreated = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func newService(name string, mutate ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: name, UID: types.UID("svc-" + name), ResourceVersion: "1",
			CreationTimestamp: testCreated,
		},
		Spec: v1.ServiceSpec{
			Selector:   map[string]string{"app": "web"},
			ClusterIP:  "10.0.0.1",
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func newPod(name, ip string, ready bool, mutate ...func(*v1.Pod)) *v1.Pod {
	status := v1.ConditionFalse
	if ready {
		status = v1.ConditionTrue
	}
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			Labels: map[string]string{"app": "web"},
		},
		Spec: v1.PodSpec{
			NodeName: "node-1",
			Containers: []v1.Container{{
				Name:  "c",
				Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
			}},
		},
		Status: v1.PodStatus{
			Phase:      v1.PodRunning,
			Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: status, LastTransitionTime: testCreated}},
		},
	}
	if ip != "" {
		p.Status.PodIP = ip
		p.Status.PodIPs = []v1.PodIP{{IP: ip}}
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// addr is the address newPod(name, ip, ...) gets by default.
func addr(name, ip string) v1.EndpointAddress {
	node := "node-1"
	return v1.EndpointAddress{
		IP:        ip,
		NodeName:  &node,
		TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: testNS, Name: name, UID: types.UID("uid-" + name)},
	}
}

func port(name string, n int32) v1.EndpointPort {
	return v1.EndpointPort{Name: name, Port: n, Protocol: v1.ProtocolTCP}
}

func ptrTo[T any](v T) *T { return &v }
