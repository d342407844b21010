package endpointslice

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	endpointslicerec "k8s.io/endpointslice"
	"k8s.io/endpointslice/topologycache"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/projection"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
)

// TestProjectedObjectsGiveTheSameSlices is the projection's contract for the EndpointSlice
// controller: the library's Reconciler and topology cache compute the same slices, zones and
// hints from projected Pods and Nodes as from full ones.
// Over 80 lines: one comparison, full objects against projected ones, over a fixture of three zones of Pods and Nodes.
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
			p := testobj.RichPod(fmt.Sprintf("p-%s-%d", zone, j), fmt.Sprintf("10.0.%d.%d", i, j), j != 2)
			p.Spec.NodeName = "node-" + zone
			pods = append(pods, p)
		}
	}
	// Two ready endpoints per zone of equal CPU give every zone hints; one of the others is
	// terminating.
	pods[2].DeletionTimestamp = &metav1.Time{Time: time.Unix(1700000100, 0)}
	nodes := []*v1.Node{testobj.RichNode("node-a", "a", "4"), testobj.RichNode("node-b", "b", "4"), testobj.RichNode("node-c", "c", "4")}

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
			endpointsliceutil.NewEndpointSliceTracker(), topology, record.NewFakeRecorder(10), ManagedBy)
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
			p, err := projection.New().Transform(o.DeepCopyObject())
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
