package endpoints

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

// fixture is a controller over a fake clientset whose informer caches are fed by hand, so a
// test states exactly what the controller sees and calls syncService directly.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	recorder *record.FakeRecorder
	c        *Controller
	pods     cache.Indexer
	services cache.Indexer
	eps      cache.Indexer
	registry *prometheus.Registry
}

func newFixture(t *testing.T, opts Options, objs ...runtime.Object) *fixture {
	t.Helper()
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	f := &fixture{
		t:        t,
		client:   client,
		recorder: record.NewFakeRecorder(100),
		pods:     factory.Core().V1().Pods().Informer().GetIndexer(),
		services: factory.Core().V1().Services().Informer().GetIndexer(),
		eps:      factory.Core().V1().Endpoints().Informer().GetIndexer(),
		registry: prometheus.NewRegistry(),
	}
	f.c = New(factory.Core().V1().Pods(), factory.Core().V1().Services(), factory.Core().V1().Endpoints(),
		client, f.recorder, opts, f.registry)
	t.Cleanup(f.c.queue.ShutDown)
	f.cache(objs...)
	return f
}

// cache puts objects into the informer caches, as if the informers had delivered them.
func (f *fixture) cache(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		var idx cache.Indexer
		switch o.(type) {
		case *v1.Pod:
			idx = f.pods
		case *v1.Service:
			idx = f.services
		case *v1.Endpoints:
			idx = f.eps
		default:
			f.t.Fatalf("no cache for %T", o)
		}
		if err := idx.Update(o); err != nil {
			f.t.Fatal(err)
		}
	}
}

// uncache removes an object from the informer caches.
func (f *fixture) uncache(o runtime.Object) {
	f.t.Helper()
	for _, idx := range []cache.Indexer{f.pods, f.services, f.eps} {
		if _, exists, _ := idx.Get(o); exists {
			if err := idx.Delete(o); err != nil {
				f.t.Fatal(err)
			}
		}
	}
}

// catchUp copies the clientset's Endpoints into the cache: the informer catching up with
// what the controller wrote.
func (f *fixture) catchUp() {
	f.t.Helper()
	fixtures.CatchUp(f.t, f.client.Tracker(), f.eps, v1.SchemeGroupVersion.WithResource("endpoints"), "Endpoints")
}

// sync runs one syncService with a clean action log.
func (f *fixture) sync(key string) error {
	f.client.ClearActions()
	return f.c.syncService(context.Background(), key)
}

// writes returns the write actions on Endpoints since the last sync.
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource != "endpoints" {
			continue
		}
		switch a.GetVerb() {
		case "create", "update", "delete", "patch":
			out = append(out, a.GetVerb()+" "+a.GetNamespace()+"/"+testobj.ActionName(a))
		}
	}
	return out
}

// stored returns the Endpoints as the API server has them, or nil.
func (f *fixture) stored(name string) *v1.Endpoints {
	f.t.Helper()
	ep, err := f.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("endpoints"), testobj.NS, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	// Keep to what the controller wrote: the fake adds type and field-manager metadata.
	out := ep.(*v1.Endpoints).DeepCopy()
	out.TypeMeta = metav1.TypeMeta{}
	out.ManagedFields = nil
	return out
}

// events drains the recorded events.
func (f *fixture) events() []string { return fixtures.Events(f.recorder) }

// queued drains the keys that are ready in the queue, sorted.
func (f *fixture) queued() []string { return slices.Sorted(slices.Values(fixtures.Drain(f.c.queue))) }
