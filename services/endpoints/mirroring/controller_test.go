package mirroring

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

	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/cachedslices"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

// fixture is the mirroring controller over a fake clientset whose caches are fed by
// hand.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	recorder *record.FakeRecorder
	c        *Controller
	services cache.Indexer
	eps      cache.Indexer
	slices   cache.Indexer
	registry *prometheus.Registry
}

func newFixture(t *testing.T, opts Options) *fixture {
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
	f := &fixture{
		t:        t,
		client:   client,
		recorder: record.NewFakeRecorder(100),
		services: factory.Core().V1().Services().Informer().GetIndexer(),
		eps:      factory.Core().V1().Endpoints().Informer().GetIndexer(),
		slices:   factory.Discovery().V1().EndpointSlices().Informer().GetIndexer(),
		registry: prometheus.NewRegistry(),
	}
	f.c = New(factory.Core().V1().Endpoints(), factory.Core().V1().Services(), factory.Discovery().V1().EndpointSlices(),
		client, f.recorder, opts, f.registry)
	t.Cleanup(f.c.queue.ShutDown)
	return f
}

func (f *fixture) cache(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		idx := map[string]cache.Indexer{"*v1.Service": f.services, "*v1.Endpoints": f.eps}[fmt.Sprintf("%T", o)]
		if err := idx.Update(o); err != nil {
			f.t.Fatal(err)
		}
	}
}

// catchUp gives the slice cache what the fake API server holds.
func (f *fixture) catchUp() {
	fixtures.CatchUp(f.t, f.client.Tracker(), f.slices, discovery.SchemeGroupVersion.WithResource("endpointslices"), "EndpointSlice")
}

func (f *fixture) sync(key string) ([]string, error) {
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
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: name}}
}

func TestMirrorControllerSync(t *testing.T) {
	f := newFixture(t, Options{ConcurrentSyncs: 1, MaxEndpointsPerSubset: 2})
	ep := customEndpoints(v1.EndpointSubset{Addresses: addrs("10.0.0.1", "10.0.0.2", "10.0.0.3"), Ports: port80})
	ep.Namespace = testobj.NS
	f.cache(selectorless("ext"), ep)
	key := testobj.NS + "/ext"

	w, err := f.sync(key)
	if err != nil || !slices.Equal(w, []string{"create"}) {
		t.Fatalf("first sync: writes %v, err %v; want one create", w, err)
	}
	if ev := fixtures.Events(f.recorder); len(ev) != 1 || !strings.Contains(ev[0], ReasonTooManyAddressesToMirror) || !strings.Contains(ev[0], "A max of 2 addresses") {
		t.Fatalf("events %v, want one TooManyAddressesToMirror", ev)
	}
	// Before the cache has the created slice: stale, nothing written.
	if w, err := f.sync(key); !errors.Is(err, cachedslices.ErrStale) || len(w) != 0 {
		t.Fatalf("sync over a cache without the slice just created: writes %v, err %v; want none and cachedslices.ErrStale", w, err)
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
	f := newFixture(t, DefaultOptions())
	withSelector := selectorless("web")
	withSelector.Spec.Selector = map[string]string{"app": "web"}
	f.cache(withSelector, selectorless("ext"))
	web := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "web"}}
	ext := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "ext", Labels: map[string]string{}}}
	lock := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "lock",
		Annotations: map[string]string{"control-plane.alpha.kubernetes.io/leader": "{}"}}}

	f.c.onEndpoints(web)
	f.c.onEndpoints(lock)
	f.c.onEndpoints(ext)
	if got := fixtures.Drain(f.c.queue); !slices.Equal(got, []string{testobj.NS + "/ext"}) {
		t.Fatalf("queued %v; want only the custom Endpoints of the selector-less Service", got)
	}
	skipped := ext.DeepCopy()
	skipped.Labels[discovery.LabelSkipMirror] = "true"
	f.c.onEndpointsUpdate(ext, skipped)
	f.c.onEndpointsUpdate(skipped, skipped.DeepCopy())
	if got := fixtures.Drain(f.c.queue); !slices.Equal(got, []string{testobj.NS + "/ext"}) {
		t.Fatalf("queued %v; want ext once (turning skip-mirror), not again while it stays skipped", got)
	}
	dropped := withSelector.DeepCopy()
	dropped.Spec.Selector = nil
	f.c.onServiceUpdate(withSelector, dropped)
	f.c.onServiceUpdate(withSelector, withSelector.DeepCopy())
	if got := fixtures.Drain(f.c.queue); !slices.Equal(got, []string{testobj.NS + "/web"}) {
		t.Fatalf("queued %v; want web once (its selector went)", got)
	}
	// A slice of the endpointslice controller is none of the mirroring controller's business.
	f.c.onSliceAdd(&discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "web-1",
		Labels: map[string]string{discovery.LabelServiceName: "web", discovery.LabelManagedBy: endpointslice.ManagedBy}}})
	f.c.onSliceAdd(&discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "ext-1",
		Labels: map[string]string{discovery.LabelServiceName: "ext", discovery.LabelManagedBy: ManagedBy}}})
	if got := fixtures.Drain(f.c.queue); !slices.Equal(got, []string{testobj.NS + "/ext"}) {
		t.Fatalf("queued %v; want ext for the unexpected mirrored slice", got)
	}
}

// subjectRecorder keeps each Event with the object it was recorded on.
type subjectRecorder struct{ events []subjectEvent }

type subjectEvent struct {
	obj                   runtime.Object
	kind, reason, message string
}

func (r *subjectRecorder) Event(obj runtime.Object, kind, reason, message string) {
	r.events = append(r.events, subjectEvent{obj, kind, reason, message})
}

func (r *subjectRecorder) Eventf(obj runtime.Object, kind, reason, format string, args ...any) {
	r.Event(obj, kind, reason, fmt.Sprintf(format, args...))
}

func (r *subjectRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, kind, reason, format string, args ...any) {
	r.Eventf(obj, kind, reason, format, args...)
}

func (r *subjectRecorder) take() []subjectEvent {
	out := r.events
	r.events = nil
	return out
}

// Deleting mirrored slices is removing state: one Event names the reason, on the Endpoints
// (on the Service once the Endpoints is gone), and a sync repeated before the cache catches
// up records no second one.
func TestMirrorControllerUnmirrorEvent(t *testing.T) {
	f := newFixture(t, DefaultOptions())
	rec := &subjectRecorder{}
	f.c.recorder = rec
	svc := selectorless("ext")
	ep := customEndpoints(v1.EndpointSubset{Addresses: addrs("10.0.0.1"), Ports: port80})
	ep.Namespace = testobj.NS
	f.cache(svc, ep)
	key := testobj.NS + "/ext"
	mirror := func() {
		t.Helper()
		if w, err := f.sync(key); err != nil || !slices.Equal(w, []string{"create"}) {
			t.Fatalf("mirroring: writes %v, err %v; want one create", w, err)
		}
		f.catchUp()
	}
	mirror()
	if ev := rec.take(); len(ev) != 0 {
		t.Fatalf("events %v while mirroring, want none", ev)
	}

	skip := ep.DeepCopy()
	skip.Labels[discovery.LabelSkipMirror] = "true"
	f.cache(skip)
	if w, err := f.sync(key); err != nil || !slices.Equal(w, []string{"delete"}) {
		t.Fatalf("skip-mirror: writes %v, err %v; want one delete", w, err)
	}
	ev := rec.take()
	if len(ev) != 1 || ev[0].obj != skip || ev[0].kind != v1.EventTypeNormal || ev[0].reason != ReasonDeletedMirroredSlices ||
		!strings.Contains(ev[0].message, "Deleted 1 EndpointSlice(s)") || !strings.Contains(ev[0].message, discovery.LabelSkipMirror+"=true") {
		t.Fatalf("events %+v; want one %s on the Endpoints naming the skip-mirror label", ev, ReasonDeletedMirroredSlices)
	}
	// The cache still lists the deleted slice: the repeated delete finds it gone.
	if w, err := f.sync(key); err != nil || !slices.Equal(w, []string{"delete"}) {
		t.Fatalf("sync over the stale cache: writes %v, err %v; want the one (NotFound) delete", w, err)
	}
	f.catchUp()
	if w, err := f.sync(key); err != nil || len(w) != 0 {
		t.Fatalf("sync once the cache caught up: writes %v, err %v; want none", w, err)
	}
	if ev := rec.take(); len(ev) != 0 {
		t.Fatalf("events %+v after the episode's first; want none", ev)
	}

	// Mirrorable again, then the Endpoints is deleted: the Event goes on the Service.
	f.cache(ep)
	mirror()
	if err := f.eps.Delete(ep); err != nil {
		t.Fatal(err)
	}
	if w, err := f.sync(key); err != nil || !slices.Equal(w, []string{"delete"}) {
		t.Fatalf("Endpoints deleted: writes %v, err %v; want one delete", w, err)
	}
	ev = rec.take()
	if len(ev) != 1 || ev[0].obj != svc || ev[0].reason != ReasonDeletedMirroredSlices || !strings.Contains(ev[0].message, "the Endpoints was deleted") {
		t.Fatalf("events %+v; want one %s on the Service", ev, ReasonDeletedMirroredSlices)
	}
}

// TestShardedUnmirrorNeedsALiveNotFound: a sharded controller whose cache lost a Service that
// still exists keeps the mirrored slices; once the Service is gone live too, they go. Keys of
// other shards' namespaces are not synced at all.
func TestShardedUnmirrorNeedsALiveNotFound(t *testing.T) {
	shard := sharding.Shard{Index: 0, Count: 2}
	if !shard.Owns(testobj.NS) {
		shard.Index = 1
	}
	f := newFixture(t, Options{ConcurrentSyncs: 1, MaxEndpointsPerSubset: 100, Shard: shard})
	ep := customEndpoints(v1.EndpointSubset{Addresses: addrs("10.0.0.1"), Ports: port80})
	ep.Namespace = testobj.NS
	svc := selectorless("ext")
	if _, err := f.client.CoreV1().Services(testobj.NS).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.cache(svc, ep)
	key := testobj.NS + "/ext"
	if w, err := f.sync(key); err != nil || !slices.Equal(w, []string{"create"}) {
		t.Fatalf("first sync: writes %v, err %v; want one create", w, err)
	}
	f.catchUp()

	// The Service leaves this shard's cache, not the API.
	if err := f.services.Delete(svc); err != nil {
		t.Fatal(err)
	}
	if w, err := f.sync(key); err == nil || len(w) != 0 {
		t.Fatalf("Service missing from the cache but live: writes %v, err %v; want none and an error (retry)", w, err)
	}
	// Gone for real.
	if err := f.client.CoreV1().Services(testobj.NS).Delete(context.Background(), "ext", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if w, err := f.sync(key); err != nil || !slices.Equal(w, []string{"delete"}) {
		t.Fatalf("Service gone live: writes %v, err %v; want one delete", w, err)
	}

	other := sharding.Shard{Index: 1 - shard.Index, Count: 2}
	g := newFixture(t, Options{ConcurrentSyncs: 1, MaxEndpointsPerSubset: 100, Shard: other})
	g.cache(selectorless("ext"), ep)
	if w, err := g.sync(key); err != nil || len(w) != 0 {
		t.Fatalf("another shard's key: writes %v, err %v; want nothing", w, err)
	}
}
