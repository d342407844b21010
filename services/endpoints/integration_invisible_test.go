package endpointscontroller_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/services/endpoints/endpoints"
	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// hidingServices is a Service informer that never shows Services named hidden, as a shard's
// informer stops showing what leaves its view (a range change, a watch restarted with another
// selector): the Service exists, this cache does not have it.
func hidingServices(c kubernetes.Interface, hidden string) func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
	keep := func(obj runtime.Object) bool {
		s, ok := obj.(*corev1.Service)
		return !ok || s.Name != hidden
	}
	return func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				l, err := c.CoreV1().Services("").List(ctx, o)
				if err != nil {
					return nil, err
				}
				kept := l.Items[:0]
				for _, s := range l.Items {
					if keep(&s) {
						kept = append(kept, s)
					}
				}
				l.Items = kept
				return l, nil
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				w, err := c.CoreV1().Services("").Watch(ctx, o)
				if err != nil {
					return nil, err
				}
				return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) { return ev, keep(ev.Object) }), nil
			},
		}
		return cache.NewSharedIndexInformer(lw, &corev1.Service{}, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
}

// TestInvisibleServiceIsNotDeleted: a sharded endpoints controller whose cache lacks a
// Service that exists keeps that Service's Endpoints (a live read disagrees with the cache),
// and deletes them once the Service is really gone.
func TestInvisibleServiceIsNotDeleted(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	shard := sharding.Shard{Index: 0, Count: 2}
	if !shard.Owns(ns) {
		shard.Index = 1
	}
	sel := map[string]string{"app": "web"}
	createService(t, c, makeService(ns, "web", sel))
	createPod(t, c, makePod(ns, "web-0", "10.8.0.1", sel))
	ep, err := c.CoreV1().Endpoints(ns).Create(context.Background(), &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Subsets:    []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.8.0.1"}}, Ports: []corev1.EndpointPort{{Name: "http", Port: 8080}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactory(c, 0)
	factory.InformerFor(&corev1.Service{}, hidingServices(c, "web"))
	reg := prometheus.NewRegistry()
	opts := endpoints.DefaultOptions()
	opts.Shard = shard
	ctrl := endpoints.New(factory.Core().V1().Pods(), factory.Core().V1().Services(), factory.Core().V1().Endpoints(),
		c, record.NewFakeRecorder(100), opts, reg)
	factory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx, 1) }()
	defer func() { cancel(); <-done; factory.Shutdown() }()

	// The start-up sweep queues the Endpoints; its Service is not in the cache. Several
	// retries (each a live read finding the Service) must pass with the Endpoints kept.
	retries := func() float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "workqueue_retries_total" {
				for _, m := range mf.GetMetric() {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return retries() >= 3, nil
	}); err != nil {
		t.Fatalf("the Endpoints of the invisible Service were not retried 3 times: %v", err)
	}
	got, err := c.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil || got.UID != ep.UID {
		t.Fatalf("Endpoints of a Service that exists but is missing from the shard's cache: %v (uid %v, was %v)", err, got.GetUID(), ep.UID)
	}

	// Gone for real: the next retry's live read agrees, and the Endpoints go.
	if err := c.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("Endpoints of a deleted Service kept: %v", err)
	}
}
