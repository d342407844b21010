package endpoints

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

// mirrorFixture is the mirroring controller over a fake clientset whose caches are fed by
// hand.
type mirrorFixture struct {
	t        *testing.T
	client   *fake.Clientset
	recorder *record.FakeRecorder
	c        *MirrorController
	services cache.Indexer
	eps      cache.Indexer
	slices   cache.Indexer
	registry *prometheus.Registry
}

func newMirrorFixture(t *testing.T, opts Options) *mirrorFixture {
	t.Helper()
	client := fake.NewClientset()
	// The fake does not generate names.
	var n atomic.Int32
	client.PrependReactor("create", "endpointslices", func(a clienttesting.Action) (bool, runtime.Object, error) {
		s := a.(clienttesting.CreateAction).GetObject().(*discovery.EndpointSlice)
		if s.Name == "" {
			s.Name = fmt.Sprintf("%s%d", s.GenerateName, n.Add(1))
		}
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	f := &mirrorFixture{
		t:        t,
		client:   client,
		recorder: record.NewFakeRecorder(100),
		services: factory.Core().V1().Services().Informer().GetIndexer(),
		eps:      factory.Core().V1().Endpoints().Informer().GetIndexer(),
		slices:   factory.Discovery().V1().EndpointSlices().Informer().GetIndexer(),
		registry: prometheus.NewRegistry(),
	}
	f.c = NewMirrorController(factory.Core().V1().Endpoints(), factory.Core().V1().Services(), factory.Discovery().V1().EndpointSlices(),
		client, f.recorder, opts, f.registry)
	t.Cleanup(f.c.queue.ShutDown)
	return f
}

func (f *mirrorFixture) cache(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		idx := map[string]cache.Indexer{"*v1.Service": f.services, "*v1.Endpoints": f.eps}[fmt.Sprintf("%T", o)]
		if err := idx.Update(o); err != nil {
			f.t.Fatal(err)
		}
	}
}

// catchUp gives the slice cache what the fake API server holds.
func (f *mirrorFixture) catchUp() {
	fixtures.CatchUp(f.t, f.client.Tracker(), f.slices, discovery.SchemeGroupVersion.WithResource("endpointslices"), "EndpointSlice")
}

func (f *mirrorFixture) sync(key string) ([]string, error) {
	f.client.ClearActions()
	err := f.c.sync(context.Background(), key)
	var out []string
	for _, a := range fixtures.Writes(f.client.Actions()) {
		if a.GetResource().Resource == "endpointslices" {
			out = append(out, a.GetVerb())
		}
	}
	return out, err
}

func selectorless(name string) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name}}
}

func TestMirrorControllerSync(t *testing.T) {
	f := newMirrorFixture(t, with(func(o *Options) { o.MirroringMaxEndpointsPerSubset = 2 }))
	ep := customEndpoints(v1.EndpointSubset{Addresses: addrs("10.0.0.1", "10.0.0.2", "10.0.0.3"), Ports: port80})
	ep.Namespace = testNS
	f.cache(selectorless("ext"), ep)
	key := testNS + "/ext"

	w, err := f.sync(key)
	if err != nil || !slices.Equal(w, []string{"create"}) {
		t.Fatalf("first sync: writes %v, err %v; want one create", w, err)
	}
	if ev := fixtures.Events(f.recorder); len(ev) != 1 || !strings.Contains(ev[0], ReasonTooManyAddressesToMirror) || !strings.Contains(ev[0], "A max of 2 addresses") {
		t.Fatalf("events %v, want one TooManyAddressesToMirror", ev)
	}
	// Before the cache has the created slice: stale, nothing written.
	if w, err := f.sync(key); !errors.Is(err, errStaleSlices) || len(w) != 0 {
		t.Fatalf("sync over a cache without the slice just created: writes %v, err %v; want none and errStaleSlices", w, err)
	}
	f.catchUp()
	if w, err := f.sync(key); err != nil || len(w) != 0 {
		t.Fatalf("resync wrote %v, err %v; want nothing", w, err)
	}
	if got := testutil.ToFloat64(f.c.metrics.endpointsDesired); got != 2 {
		t.Fatalf("endpoints_desired = %v, want 2", got)
	}
	if got := testutil.ToFloat64(f.c.metrics.changes.WithLabelValues("create")); got != 1 {
		t.Fatalf(`changes{operation="create"} = %v, want 1`, got)
	}

	// skip-mirror: the slice goes, and the metrics forget the Endpoints.
	skip := ep.DeepCopy()
	skip.Labels[discovery.LabelSkipMirror] = "true"
	f.cache(skip)
	if w, err := f.sync(key); err != nil || !slices.Equal(w, []string{"delete"}) {
		t.Fatalf("skip-mirror: writes %v, err %v; want one delete", w, err)
	}
	if got := testutil.ToFloat64(f.c.metrics.numSlices); got != 0 {
		t.Fatalf("num_endpoint_slices = %v after unmirroring, want 0", got)
	}
}

func TestMirrorControllerHandlers(t *testing.T) {
	f := newMirrorFixture(t, DefaultOptions())
	withSelector := selectorless("web")
	withSelector.Spec.Selector = map[string]string{"app": "web"}
	f.cache(withSelector, selectorless("ext"))
	web := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web"}}
	ext := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "ext", Labels: map[string]string{}}}
	lock := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "lock",
		Annotations: map[string]string{"control-plane.alpha.kubernetes.io/leader": "{}"}}}

	f.c.onEndpoints(web)
	f.c.onEndpoints(lock)
	f.c.onEndpoints(ext)
	if got := fixtures.Drain(f.c.queue); !slices.Equal(got, []string{testNS + "/ext"}) {
		t.Fatalf("queued %v; want only the custom Endpoints of the selector-less Service", got)
	}
	skipped := ext.DeepCopy()
	skipped.Labels[discovery.LabelSkipMirror] = "true"
	f.c.onEndpointsUpdate(ext, skipped)
	f.c.onEndpointsUpdate(skipped, skipped.DeepCopy())
	if got := fixtures.Drain(f.c.queue); !slices.Equal(got, []string{testNS + "/ext"}) {
		t.Fatalf("queued %v; want ext once (turning skip-mirror), not again while it stays skipped", got)
	}
	dropped := withSelector.DeepCopy()
	dropped.Spec.Selector = nil
	f.c.onServiceUpdate(withSelector, dropped)
	f.c.onServiceUpdate(withSelector, withSelector.DeepCopy())
	if got := fixtures.Drain(f.c.queue); !slices.Equal(got, []string{testNS + "/web"}) {
		t.Fatalf("queued %v; want web once (its selector went)", got)
	}
	// A slice of the endpointslice controller is none of the mirroring controller's business.
	f.c.onSliceAdd(&discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web-1",
		Labels: map[string]string{discovery.LabelServiceName: "web", discovery.LabelManagedBy: SliceManagedBy}}})
	f.c.onSliceAdd(&discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "ext-1",
		Labels: map[string]string{discovery.LabelServiceName: "ext", discovery.LabelManagedBy: MirrorManagedBy}}})
	if got := fixtures.Drain(f.c.queue); !slices.Equal(got, []string{testNS + "/ext"}) {
		t.Fatalf("queued %v; want ext for the unexpected mirrored slice", got)
	}
}
