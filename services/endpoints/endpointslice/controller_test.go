package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	endpointslicerec "k8s.io/endpointslice"
	"k8s.io/endpointslice/topologycache"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/cachedslices"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/projection"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

// fixture is a Controller over a fake clientset whose caches are fed by hand. The
// fake API server names created slices and counts generations as the real one does, which
// the library's stale-cache tracker relies on.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	c        *Controller
	pods     cache.Indexer
	services cache.Indexer
	slices   cache.Indexer
	registry *prometheus.Registry
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	client := fake.NewClientset()
	created := 0
	client.PrependReactor("create", "endpointslices", func(a clienttesting.Action) (bool, runtime.Object, error) {
		s := a.(clienttesting.CreateAction).GetObject().(*discovery.EndpointSlice)
		created++
		s.Name, s.Generation = fmt.Sprintf("%s%d", s.GenerateName, created), 1
		return false, nil, nil
	})
	client.PrependReactor("update", "endpointslices", func(a clienttesting.Action) (bool, runtime.Object, error) {
		a.(clienttesting.UpdateAction).GetObject().(*discovery.EndpointSlice).Generation++
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	f := &fixture{
		t:        t,
		client:   client,
		pods:     factory.Core().V1().Pods().Informer().GetIndexer(),
		services: factory.Core().V1().Services().Informer().GetIndexer(),
		slices:   factory.Discovery().V1().EndpointSlices().Informer().GetIndexer(),
		registry: prometheus.NewRegistry(),
	}
	nodes := factory.Core().V1().Nodes()
	if err := nodes.Informer().GetIndexer().Add(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}); err != nil {
		t.Fatal(err)
	}
	f.c = New(factory.Core().V1().Pods(), factory.Core().V1().Services(), factory.Discovery().V1().EndpointSlices(),
		nodes, client, record.NewFakeRecorder(100), DefaultOptions(), true, f.registry)
	t.Cleanup(f.c.queue.ShutDown)
	t.Cleanup(f.c.topology.ShutDown)
	f.cache(objs...)
	return f
}

func (f *fixture) cache(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		idx := f.pods
		if _, ok := o.(*v1.Service); ok {
			idx = f.services
		}
		if err := idx.Update(o); err != nil {
			f.t.Fatal(err)
		}
	}
}

// catchUp copies the fake API server's slices into the cache.
func (f *fixture) catchUp() {
	f.t.Helper()
	fixtures.CatchUp(f.t, f.client.Tracker(), f.slices, discovery.SchemeGroupVersion.WithResource("endpointslices"), "EndpointSlice")
}

func (f *fixture) sync(key string) error {
	f.client.ClearActions()
	return f.c.syncService(context.Background(), key)
}

// writes lists the slice writes of the last sync as "verb name".
func (f *fixture) writes() []string {
	var out []string
	for _, a := range fixtures.Writes(f.client.Actions()) {
		if a.GetResource().Resource == "endpointslices" {
			out = append(out, a.GetVerb()+" "+testobj.ActionName(a))
		}
	}
	return out
}

func (f *fixture) stored() []discovery.EndpointSlice {
	f.t.Helper()
	list, err := f.client.DiscoveryV1().EndpointSlices(testobj.NS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

func (f *fixture) syncs(result string) float64 {
	f.t.Helper()
	families, err := f.registry.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "endpoint_slice_controller_syncs" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestSliceSyncWritesOnlyDifferences(t *testing.T) {
	svc := testobj.Service("web")
	a, b := testobj.Pod("a", "10.0.0.1", true), testobj.Pod("b", "10.0.0.2", false)
	f := newFixture(t, svc, a, b)

	if err := f.sync("ns/web"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 1 || !strings.HasPrefix(w[0], "create") {
		t.Fatalf("first sync wrote %v, want one create", w)
	}
	s := f.stored()[0]
	if !strings.HasPrefix(s.Name, "web-") || s.Labels[discovery.LabelManagedBy] != ManagedBy || s.Labels[discovery.LabelServiceName] != "web" ||
		len(s.Endpoints) != 2 || metav1.GetControllerOf(&s) == nil || metav1.GetControllerOf(&s).UID != svc.UID {
		t.Fatalf("created slice: %+v", s)
	}

	// The informer delivers the slice: a resync writes nothing.
	f.catchUp()
	if err := f.sync("ns/web"); err != nil || len(f.writes()) != 0 {
		t.Fatalf("resync: err %v, writes %v; want neither", err, f.writes())
	}

	// b turns ready: one update. Until the informer delivers it, the cached slice is older
	// than the controller's own write, and the sync waits rather than undo it.
	b = b.DeepCopy()
	b.ResourceVersion = "2"
	b.Status.Conditions[0].Status = v1.ConditionTrue
	f.cache(b)
	if err := f.sync("ns/web"); err != nil || len(f.writes()) != 1 || !strings.HasPrefix(f.writes()[0], "update ") {
		t.Fatalf("readiness flip: err %v, writes %v; want one update", err, f.writes())
	}
	if err := f.sync("ns/web"); !errors.Is(err, cachedslices.ErrStale) || len(f.writes()) != 0 {
		t.Fatalf("sync over a stale cache: err %v, writes %v; want cachedslices.ErrStale and no write", err, f.writes())
	}
	f.catchUp()
	if err := f.sync("ns/web"); err != nil || len(f.writes()) != 0 {
		t.Fatalf("sync after catching up: err %v, writes %v; want neither", err, f.writes())
	}
	if f.syncs("success") != 4 || f.syncs("stale") != 1 || f.syncs("error") != 0 {
		t.Fatalf("endpoint_slice_controller_syncs: success %v stale %v error %v; want 4, 1, 0", f.syncs("success"), f.syncs("stale"), f.syncs("error"))
	}
	if n := testutil.CollectAndCount(f.registry, "endpoint_slice_controller_changes"); n == 0 {
		t.Fatal("endpoint_slice_controller_changes not registered")
	}
}

func TestSliceSyncLeavesServicesWithoutSlicesAlone(t *testing.T) {
	noSelector := testobj.Service("manual", func(s *v1.Service) { s.Spec.Selector = nil })
	external := testobj.Service("alias", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeExternalName; s.Spec.ExternalName = "example.com" })
	f := newFixture(t, noSelector, external, testobj.Pod("a", "10.0.0.1", true))
	for _, key := range []string{"ns/manual", "ns/alias", "ns/gone"} {
		if err := f.sync(key); err != nil || len(f.writes()) != 0 {
			t.Fatalf("%s: err %v, writes %v; want neither", key, err, f.writes())
		}
	}
}

// A Pod on a Node the cache does not know is left out and the sync fails, so that it is
// retried once the Node appears (upstream's behaviour), unless the Service publishes
// not-ready addresses.
func TestSliceSyncRetriesPodsOfUnknownNodes(t *testing.T) {
	orphan := testobj.Pod("a", "10.0.0.1", true, func(p *v1.Pod) { p.Spec.NodeName = "node-unknown" })
	f := newFixture(t, testobj.Service("web"), orphan)
	if err := f.sync("ns/web"); err == nil {
		t.Fatal("sync succeeded with a Pod on an unknown Node")
	}
	if s := f.stored(); len(s) != 1 || len(s[0].Endpoints) != 0 {
		t.Fatalf("slices: %+v; want the placeholder without the Pod", s)
	}
}

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
