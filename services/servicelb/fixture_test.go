package servicelb

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/services/servicelb/internal/testobj"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

const testNS = testobj.Namespace

// fixture is a controller over fake clients whose caches are fed by hand: a test states what
// the controller sees and calls the sync functions directly.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	dyn      *dynamicfake.FakeDynamicClient
	recorder *record.FakeRecorder
	c        *Controller
	services cache.Indexer
	nodes    cache.Indexer
	ns       cache.Indexer
	pools    cache.Store
	claims   cache.Indexer
	registry *prometheus.Registry
	// poolsSynced is what the controller is told about the pool cache's sync.
	poolsSynced bool
}

func newFixture(t *testing.T, opts Options, objs ...runtime.Object) *fixture {
	t.Helper()
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.GroupVersionResource: "IPAddressPoolList"})
	poolInf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	f := &fixture{
		t:           t,
		client:      client,
		dyn:         dyn,
		recorder:    record.NewFakeRecorder(100),
		services:    factory.Core().V1().Services().Informer().GetIndexer(),
		nodes:       factory.Core().V1().Nodes().Informer().GetIndexer(),
		ns:          factory.Core().V1().Namespaces().Informer().GetIndexer(),
		pools:       poolInf.GetStore(),
		claims:      factory.Networking().V1().IPAddresses().Informer().GetIndexer(),
		registry:    prometheus.NewRegistry(),
		poolsSynced: true,
	}
	sources, err := opts.poolSources(dyn)
	if err != nil {
		t.Fatal(err)
	}
	f.c = New(factory.Core().V1().Services(), factory.Core().V1().Nodes(), factory.Core().V1().Namespaces(),
		factory.Networking().V1().IPAddresses(), client, f.recorder, opts, f.registry, sources...)
	f.c.AddPoolInformer(poolsource.KCMSplit.Name, poolInf)
	if own := f.c.feed(poolsource.KCMSplit.Name); own != nil {
		own.synced = func() bool { return f.poolsSynced }
	}
	t.Cleanup(func() { f.c.queue.ShutDown(); f.c.nodeQueue.ShutDown(); f.c.poolQueue.ShutDown() })
	f.cache(objs...)
	f.node("node-1")
	return f
}

func testOptions() Options {
	o := DefaultOptions()
	o.PoolStatusDelay = 0
	return o
}

// cache puts objects into the informer caches.
func (f *fixture) cache(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		var idx cache.Store
		switch o.(type) {
		case *v1.Service:
			idx = f.services
		case *v1.Node:
			idx = f.nodes
		case *v1.Namespace:
			idx = f.ns
		default:
			f.t.Fatalf("no cache for %T", o)
		}
		if err := idx.Update(o); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) node(name string) {
	f.t.Helper()
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	f.cache(n)
}

// pool adds an IPAddressPool to the cache and to the fake API, and refreshes the controller.
func (f *fixture) pool(name string, addrs []string, mut ...func(*v1alpha1.IPAddressPool)) {
	f.t.Helper()
	p := &v1alpha1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(time.Unix(int64(len(f.pools.List())), 0))},
		Spec:       v1alpha1.IPAddressPoolSpec{Addresses: addrs},
	}
	for _, m := range mut {
		m(p)
	}
	u, err := v1alpha1.ToUnstructured(p)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.pools.Update(u); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.dyn.Resource(v1alpha1.GroupVersionResource).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		_, _ = f.dyn.Resource(v1alpha1.GroupVersionResource).Update(context.Background(), u, metav1.UpdateOptions{})
	}
	f.c.refreshPools()
}

// catchUp copies the clientset's Services into the cache: the informer catching up.
func (f *fixture) catchUp() {
	f.t.Helper()
	fixtures.CatchUp(f.t, f.client.Tracker(), f.services, v1.SchemeGroupVersion.WithResource("services"), "Service")
}

func (f *fixture) sync(name string) error {
	f.claimsCatchUp()
	f.client.ClearActions()
	return f.c.syncService(context.Background(), testNS+"/"+name)
}

// claimsCatchUp makes the claim cache show exactly the claims the fake API server has: the
// claim informer is quick, and a test that wants it behind says so.
func (f *fixture) claimsCatchUp() {
	f.t.Helper()
	list, err := f.client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	objs := make([]any, 0, len(list.Items))
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	if err := f.claims.Replace(objs, ""); err != nil {
		f.t.Fatal(err)
	}
}

// claim returns the stored claim of ip, or nil.
func (f *fixture) claim(ip string) *networkingv1.IPAddress {
	f.t.Helper()
	c, err := f.client.NetworkingV1().IPAddresses().Get(context.Background(), ip, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return c
}

// claimWrites lists the IPAddress writes since the last sync as "verb name".
func (f *fixture) claimWrites() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource != "ipaddresses" || a.GetVerb() == "get" || a.GetVerb() == "list" {
			continue
		}
		name := ""
		switch a := a.(type) {
		case clienttesting.CreateAction:
			name = a.GetObject().(*networkingv1.IPAddress).Name
		case clienttesting.DeleteAction:
			name = a.GetName()
		}
		out = append(out, a.GetVerb()+" "+name)
	}
	return out
}

// writes lists the Service writes since the last sync as "verb name[/subresource]".
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource != "services" {
			continue
		}
		switch a := a.(type) {
		case clienttesting.PatchAction:
			s := "patch " + a.GetName()
			if a.GetSubresource() != "" {
				s += "/" + a.GetSubresource()
			}
			out = append(out, s)
		case clienttesting.CreateAction, clienttesting.UpdateAction, clienttesting.DeleteAction:
			out = append(out, a.GetVerb())
		}
	}
	return out
}

// stored returns the Service as the fake API server has it.
func (f *fixture) stored(name string) *v1.Service {
	f.t.Helper()
	s, err := f.client.CoreV1().Services(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// events drains the recorded events.
func (f *fixture) events() []string { return fixtures.Events(f.recorder) }

// queued drains the keys that are ready in the Service queue, sorted.
func (f *fixture) queued() []string { return slices.Sorted(slices.Values(fixtures.Drain(f.c.queue))) }

// ---- builders ----

type svcOpt = testobj.Opt

var lb, withAnnotation = testobj.LB, testobj.WithAnnotation

func withFinalizer() svcOpt {
	return func(s *v1.Service) { s.Finalizers = []string{FinalizerLoadBalancerCleanup} }
}

func withIngress(ips ...string) svcOpt {
	return func(s *v1.Service) {
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip, IPMode: ptr.To(v1.LoadBalancerIPModeVIP)})
		}
	}
}

func withPorts(ports ...int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Ports = nil
		for _, p := range ports {
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Port: p, Protocol: v1.ProtocolTCP})
		}
	}
}

func created(sec int64) svcOpt {
	return func(s *v1.Service) { s.CreationTimestamp = metav1.NewTime(time.Unix(sec, 0)) }
}

func ips(s *v1.Service) []string {
	var out []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out
}

// gaugeSum adds up every series of a gauge vector (0 when it has none).
func gaugeSum(vec *prometheus.GaugeVec) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { vec.Collect(ch); close(ch) }()
	sum := 0.0
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err == nil && pb.Gauge != nil {
			sum += pb.Gauge.GetValue()
		}
	}
	return sum
}

// countReason counts the events with reason.
func countReason(evs []string, reason string) int {
	n := 0
	for _, e := range evs {
		if strings.Contains(e, " "+reason+" ") {
			n++
		}
	}
	return n
}

func netipAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func (f *fixture) deletePool(name string) {
	f.t.Helper()
	o, ok, _ := f.pools.GetByKey(name)
	if !ok {
		f.t.Fatalf("no pool %s", name)
	}
	if err := f.pools.Delete(o); err != nil {
		f.t.Fatal(err)
	}
	f.c.refreshPools()
}
