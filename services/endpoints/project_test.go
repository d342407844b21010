package endpoints

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	endpointslicerec "k8s.io/endpointslice"
	"k8s.io/endpointslice/topologycache"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/klog/v2"
)

// richPod has everything a real workload Pod carries, most of which the controller ignores.
func richPod(name, ip string, ready bool) *v1.Pod {
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

// TestProjectedPodsGiveTheSameEndpoints is the contract of the cache projection: whatever the
// controller computes from a full Pod it computes identically from the projected one.
func TestProjectedPodsGiveTheSameEndpoints(t *testing.T) {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []v1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: v1.ProtocolTCP},
			{Name: "admin", Port: 9901, TargetPort: intstr.FromString("admin"), Protocol: v1.ProtocolTCP},
		}},
	}
	full := []*v1.Pod{richPod("a", "10.0.0.1", true), richPod("b", "10.0.0.2", false)}
	deleting := richPod("c", "10.0.0.3", true)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1700000100, 0)}
	full = append(full, deleting)

	projected := make([]*v1.Pod, len(full))
	for i, p := range full {
		out, err := cacheTransform(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		projected[i] = out.(*v1.Pod)
	}
	for _, publish := range []bool{false, true} {
		s := svc.DeepCopy()
		s.Spec.PublishNotReadyAddresses = publish
		want, got := desiredSubsets(s, full), desiredSubsets(s, projected)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("publishNotReady=%v: subsets differ (-full +projected):\n%s", publish, diff)
		}
		if len(want) == 0 {
			t.Fatal("fixture produced no subsets; the comparison proves nothing")
		}
	}
	// Pod update filtering must also see the same changes.
	for i := range full {
		for j := range full {
			fc, fl := podChange(full[i], full[j])
			pc, pl := podChange(projected[i], projected[j])
			if fc != pc || fl != pl {
				t.Fatalf("podChange(%s,%s): full=(%v,%v) projected=(%v,%v)", full[i].Name, full[j].Name, fc, fl, pc, pl)
			}
		}
	}
	if projected[0].Annotations != nil || projected[0].Spec.Containers[0].Env != nil || projected[0].ManagedFields != nil ||
		len(projected[0].Status.Conditions) != 1 || projected[0].Status.Conditions[0].Type != v1.PodReady {
		t.Fatal("projection kept fields the controller never reads")
	}
}

func TestTransformDropsManagedFieldsOfOtherObjects(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := cacheTransform(svc)
	if err != nil {
		t.Fatal(err)
	}
	if out.(*v1.Service).ManagedFields != nil {
		t.Fatal("managedFields kept")
	}
}

func richNode(name, zone, cpu string) *v1.Node {
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

// TestProjectedObjectsGiveTheSameSlices is the projection's contract for the EndpointSlice
// controller: the library's Reconciler and topology cache compute the same slices, zones and
// hints from projected Pods and Nodes as from full ones.
func TestProjectedObjectsGiveTheSameSlices(t *testing.T) {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "svc-uid",
			Annotations: map[string]string{v1.AnnotationTopologyMode: "Auto"}},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []v1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: v1.ProtocolTCP},
			{Name: "admin", Port: 9901, TargetPort: intstr.FromString("admin"), Protocol: v1.ProtocolTCP},
		}, ClusterIP: "10.96.0.10", IPFamilies: []v1.IPFamily{v1.IPv4Protocol}},
	}
	var pods []*v1.Pod
	for i, zone := range []string{"a", "b", "c"} {
		for j := range 3 {
			p := richPod(fmt.Sprintf("p-%s-%d", zone, j), fmt.Sprintf("10.0.%d.%d", i, j), j != 2)
			p.Spec.NodeName = "node-" + zone
			pods = append(pods, p)
		}
	}
	// Two ready endpoints per zone of equal CPU give every zone hints; one of the others is
	// terminating.
	pods[2].DeletionTimestamp = &metav1.Time{Time: time.Unix(1700000100, 0)}
	nodes := []*v1.Node{richNode("node-a", "a", "4"), richNode("node-b", "b", "4"), richNode("node-c", "c", "4")}

	slicesFrom := func(pods []*v1.Pod, nodes []*v1.Node) []*discovery.EndpointSlice {
		t.Helper()
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		for _, n := range nodes {
			if err := indexer.Add(n); err != nil {
				t.Fatal(err)
			}
		}
		client := fake.NewClientset()
		topology := topologycache.NewTopologyCache()
		topology.SetNodes(klog.Background(), nodes)
		r := endpointslicerec.NewReconciler(client, corelisters.NewNodeLister(indexer), 100,
			endpointsliceutil.NewEndpointSliceTracker(), topology, record.NewFakeRecorder(10), SliceManagedBy)
		if err := r.Reconcile(klog.Background(), svc, pods, nil, time.Unix(1700000200, 0)); err != nil {
			t.Fatal(err)
		}
		list, err := client.DiscoveryV1().EndpointSlices("ns").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]*discovery.EndpointSlice, len(list.Items))
		for i := range list.Items {
			s := &list.Items[i]
			s.Name, s.ManagedFields = "", nil // generated, timed
			// The Reconciler's order of endpoints follows a map's.
			sort.Slice(s.Endpoints, func(a, b int) bool { return s.Endpoints[a].Addresses[0] < s.Endpoints[b].Addresses[0] })
			out[i] = s
		}
		return out
	}
	project := func(objs ...runtime.Object) []runtime.Object {
		out := make([]runtime.Object, len(objs))
		for i, o := range objs {
			p, err := cacheTransform(o.DeepCopyObject())
			if err != nil {
				t.Fatal(err)
			}
			out[i] = p.(runtime.Object)
		}
		return out
	}
	var pPods []*v1.Pod
	for _, o := range project(pods[0], pods[1], pods[2], pods[3], pods[4], pods[5], pods[6], pods[7], pods[8]) {
		pPods = append(pPods, o.(*v1.Pod))
	}
	var pNodes []*v1.Node
	for _, o := range project(nodes[0], nodes[1], nodes[2]) {
		pNodes = append(pNodes, o.(*v1.Node))
	}

	want, got := slicesFrom(pods, nodes), slicesFrom(pPods, pNodes)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("slices differ (-full +projected):\n%s", diff)
	}
	if len(want) != 1 || len(want[0].Endpoints) != 9 || want[0].Endpoints[0].Zone == nil || want[0].Endpoints[0].Hints == nil {
		t.Fatalf("fixture should give one slice of 9 endpoints with zones and hints: %+v", want)
	}
	if pNodes[0].Status.Images != nil || pNodes[0].Annotations != nil || len(pNodes[0].Labels) != 1 || len(pNodes[0].Status.Conditions) != 1 {
		t.Fatalf("node projection kept fields nothing reads: %+v", pNodes[0])
	}
}
