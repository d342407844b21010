package endpointscontroller

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/services/endpoints/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/mirroring"
	"github.com/kcm-split/kcm-split/shared/sharding"
)

// shardInformers puts into factory, before anything asks it for them, informers of the
// binary's namespaced types that hold only the shard's namespaces (view), listed with client
// (the factory's): Pods, Services,
// Endpoints, and the EndpointSlices managed by managedBy, each only when an enabled
// controller reads it (the factory starts every informer it holds). Nodes stay whole: the
// factory builds them as always.
func shardInformers(factory informers.SharedInformerFactory, client kubernetes.Interface, view *sharding.View, enabled map[string]bool, managedBy []string) {
	register := func(resource string, obj runtime.Object, list sharding.ListFunc, watchFn sharding.WatchFunc, tweak func(*metav1.ListOptions)) {
		factory.InformerFor(obj, func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			return view.Informer(resource, obj, list, watchFn, tweak, resync, nil)
		})
	}
	if enabled[endpoints.Name] || enabled[endpointslice.Name] {
		register("pods", &v1.Pod{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.CoreV1().Pods("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.CoreV1().Pods("").Watch(ctx, o)
			}, nil)
	}
	register("services", &v1.Service{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Services("").List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Services("").Watch(ctx, o)
		}, nil)
	if enabled[endpoints.Name] || enabled[mirroring.Name] {
		register("endpoints", &v1.Endpoints{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.CoreV1().Endpoints("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.CoreV1().Endpoints("").Watch(ctx, o)
			}, nil)
	}
	if len(managedBy) == 0 {
		return
	}
	register("endpointslices", &discovery.EndpointSlice{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.DiscoveryV1().EndpointSlices("").List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.DiscoveryV1().EndpointSlices("").Watch(ctx, o)
		}, managedBySelector(managedBy))
}
