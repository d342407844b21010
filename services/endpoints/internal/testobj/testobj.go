// Package testobj builds the objects the tests of every controller in this module start from:
// a Service and its Pods in one namespace, and the Endpoints addresses and ports they come
// to, and reads back the addresses an Endpoints holds. Each builder takes optional mutators so
// a case states only what matters to it. Only tests import it (the integration tests and the
// benchmark too).
package testobj

import (
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// NS is the namespace of every object built here.
const NS = "ns"

// Created is the creationTimestamp of built Services and the lastTransitionTime of built
// Pods' Ready condition: what trigger times are computed from.
var Created = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

// Service is a ClusterIP Service selecting app=web, port http 80 to target port 8080.
func Service(name string, mutate ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: NS, Name: name, UID: types.UID("svc-" + name), ResourceVersion: "1",
			CreationTimestamp: Created,
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

// Pod is a running Pod labelled app=web on node-1, with container port http 8080, ready or
// not; ip "" gives it no IP.
func Pod(name, ip string, ready bool, mutate ...func(*v1.Pod)) *v1.Pod {
	status := v1.ConditionFalse
	if ready {
		status = v1.ConditionTrue
	}
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: NS, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
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
			Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: status, LastTransitionTime: Created}},
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

// Address is the Endpoints address Pod(name, ip, ...) gets by default.
func Address(name, ip string) v1.EndpointAddress {
	node := "node-1"
	return v1.EndpointAddress{
		IP:        ip,
		NodeName:  &node,
		TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: NS, Name: name, UID: types.UID("uid-" + name)},
	}
}

// Port is a TCP Endpoints port.
func Port(name string, n int32) v1.EndpointPort {
	return v1.EndpointPort{Name: name, Port: n, Protocol: v1.ProtocolTCP}
}

// RichPod has everything a real workload Pod carries, most of which the controller ignores.
func RichPod(name, ip string, ready bool) *v1.Pod {
	status := v1.ConditionTrue
	if !ready {
		status = v1.ConditionFalse
	}
	big := make([]v1.EnvVar, 50)
	for i := range big {
		big[i] = v1.EnvVar{Name: "VAR_" + string(rune('A'+i%26)), Value: "some configuration value that takes space"}
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "42",
			Labels:          map[string]string{"app": "web"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": string(make([]byte, 4096))},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1", UID: "rs"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec: v1.PodSpec{
			NodeName: "node-1", Hostname: name, Subdomain: "web",
			InitContainers: []v1.Container{{Name: "proxy", Image: "envoy", RestartPolicy: new(v1.ContainerRestartPolicyAlways),
				Ports: []v1.ContainerPort{{Name: "admin", ContainerPort: 9901, Protocol: v1.ProtocolTCP}}}},
			Containers: []v1.Container{{
				Name: "app", Image: "registry.example/app:1", Env: big,
				Ports:          []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
				Resources:      v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}},
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
			}},
			Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
		},
		Status: v1.PodStatus{
			Phase: v1.PodRunning, PodIP: ip, PodIPs: []v1.PodIP{{IP: ip}}, HostIP: "192.0.2.1",
			Conditions: []v1.PodCondition{
				{Type: v1.PodScheduled, Status: v1.ConditionTrue},
				{Type: v1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(time.Unix(1700000000, 0)), Reason: "PodCompleted", Message: "kept out"},
				{Type: v1.ContainersReady, Status: status},
			},
			ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: ready, Image: "registry.example/app:1", ImageID: "sha256:abc"}},
		},
	}
}

// RichPods are three RichPods: a ready one, one not ready, and a ready one being deleted.
func RichPods() []*v1.Pod {
	deleting := RichPod("c", "10.0.0.3", true)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1700000100, 0)}
	return []*v1.Pod{RichPod("a", "10.0.0.1", true), RichPod("b", "10.0.0.2", false), deleting}
}

// Projected returns what transform (a cache projection) makes of a copy of each Pod.
func Projected(t testing.TB, pods []*v1.Pod, transform cache.TransformFunc) []*v1.Pod {
	t.Helper()
	out := make([]*v1.Pod, len(pods))
	for i, p := range pods {
		o, err := transform(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		out[i] = o.(*v1.Pod)
	}
	return out
}

// ReadyIPs are the ready addresses of every subset of ep, sorted.
func ReadyIPs(ep *v1.Endpoints) []string {
	return subsetIPs(ep, func(s v1.EndpointSubset) []v1.EndpointAddress { return s.Addresses })
}

// NotReadyIPs are the not-ready addresses of every subset of ep, sorted.
func NotReadyIPs(ep *v1.Endpoints) []string {
	return subsetIPs(ep, func(s v1.EndpointSubset) []v1.EndpointAddress { return s.NotReadyAddresses })
}

// IPs are the addresses' IPs, sorted.
func IPs(addrs []v1.EndpointAddress) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.IP)
	}
	sort.Strings(out)
	return out
}

func subsetIPs(ep *v1.Endpoints, pick func(v1.EndpointSubset) []v1.EndpointAddress) []string {
	var addrs []v1.EndpointAddress
	for _, s := range ep.Subsets {
		addrs = append(addrs, pick(s)...)
	}
	return IPs(addrs)
}

// RichNode is a Node as a kubelet reports it, with images, addresses and heartbeats.
func RichNode(name, zone, cpu string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7",
			Labels:        map[string]string{v1.LabelTopologyZone: zone, v1.LabelHostname: name, "kubernetes.io/os": "linux"},
			Annotations:   map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		},
		Spec: v1.NodeSpec{PodCIDR: "10.244.0.0/24"},
		Status: v1.NodeStatus{
			Capacity:    v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("8Gi")},
			Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("7Gi")},
			Conditions: []v1.NodeCondition{
				{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse},
				{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(time.Unix(1700000000, 0))},
			},
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.0.2.1"}},
			Images:    []v1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1 << 20}},
		},
	}
}

// ActionName is the name of the object a fake clientset action writes: what a test lists
// its writes by.
func ActionName(a clienttesting.Action) string {
	switch a := a.(type) {
	case interface{ GetName() string }: // delete, patch
		return a.GetName()
	case interface{ GetObject() runtime.Object }: // create, update
		if o, ok := a.GetObject().(metav1.Object); ok {
			return o.GetName()
		}
	}
	return ""
}
