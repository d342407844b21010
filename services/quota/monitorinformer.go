package quota

import (
	"context"
	"fmt"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	coreinformers "k8s.io/client-go/informers/core/v1"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/sharding"
)

// monitorState is how far a resource type's informer has got.
type monitorState int

const (
	// stateStarting: listing, not yet past the sync timeout.
	stateStarting monitorState = iota
	// stateSynced: the cache holds every object; usage can be computed.
	stateSynced
	// stateFailing: not synced within the sync timeout (a conversion webhook down, an
	// aggregated API unreachable, no permission). Quotas keep their last value for it.
	stateFailing
	// stateUnknown: discovery does not (or cannot) say which version serves the type.
	stateUnknown
)

// monitor is one resource type's informer, started on demand the first time a quota tracks it.
type monitor struct {
	gr       schema.GroupResource
	gvr      schema.GroupVersionResource
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	synced   atomic.Bool
	timedOut atomic.Bool
	lastErr  atomic.Pointer[string]
	// countedFailing says whether this monitor is counted in monitors.failing, so that it is
	// counted in and out exactly once whatever order syncing and stopping happen in.
	countedFailing atomic.Bool
	// classes is the DeviceClass informer of the claims monitor when claims are charged
	// extended resources (nil otherwise): which extended resources each class provides,
	// kept in classMap. Claims are counted only once both have synced.
	classes  cache.SharedIndexInformer
	classMap *extendedresourcecache.ExtendedResourceCache
}

func (m *monitor) hasSynced() bool {
	return m.informer.HasSynced() && (m.classes == nil || m.classes.HasSynced())
}

func (m *monitor) state() monitorState {
	switch {
	case m.synced.Load():
		return stateSynced
	case m.timedOut.Load():
		return stateFailing
	}
	return stateStarting
}

// reason explains why the type cannot be counted, for the Event.
func (m *monitor) reason() string {
	if e := m.lastErr.Load(); e != nil {
		return *e
	}
	return "its informer has not listed it yet"
}

// list returns the cached objects of one namespace.
func (m *monitor) list(namespace string) ([]any, error) {
	return m.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
}

// newInformer builds the informer of gvr into m, the one kind the evaluator of its type reads:
// typed and trimmed for Pods, Services, PVCs and claims, metadata only for the rest.
func (ms *monitors) newInformer(ctx context.Context, m *monitor, gvr schema.GroupVersionResource) {
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	switch m.gr {
	case podsResource:
		m.informer = ms.typed(gvr.Resource, &v1.Pod{}, indexers, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ms.client.CoreV1().Pods("").List(ctx, o)
		}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ms.client.CoreV1().Pods("").Watch(ctx, o)
		}, func() cache.SharedIndexInformer {
			return coreinformers.NewPodInformer(ms.client, metav1.NamespaceAll, 0, indexers)
		})
		_ = m.informer.SetTransform(podTransform(ms.charge))
	case servicesResource:
		m.informer = ms.typed(gvr.Resource, &v1.Service{}, indexers, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ms.client.CoreV1().Services("").List(ctx, o)
		}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ms.client.CoreV1().Services("").Watch(ctx, o)
		}, func() cache.SharedIndexInformer {
			return coreinformers.NewServiceInformer(ms.client, metav1.NamespaceAll, 0, indexers)
		})
		_ = m.informer.SetTransform(trimService)
	case pvcsResource:
		m.informer = ms.typed(gvr.Resource, &v1.PersistentVolumeClaim{}, indexers, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ms.client.CoreV1().PersistentVolumeClaims("").List(ctx, o)
		}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ms.client.CoreV1().PersistentVolumeClaims("").Watch(ctx, o)
		}, func() cache.SharedIndexInformer {
			return coreinformers.NewPersistentVolumeClaimInformer(ms.client, metav1.NamespaceAll, 0, indexers)
		})
		_ = m.informer.SetTransform(trimMeta)
	case claimsResource:
		if gvr.Version != resourceapi.SchemeGroupVersion.Version {
			// Typed for the version the evaluator reads; an apiserver serving another one
			// as preferred still serves v1 (GA since 1.34).
			gvr.Version = resourceapi.SchemeGroupVersion.Version
			m.gvr = gvr
		}
		indexers[claimOwnerIndex] = indexClaimOwner
		m.informer = ms.typed(gvr.Resource, &resourceapi.ResourceClaim{}, indexers, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ms.client.ResourceV1().ResourceClaims("").List(ctx, o)
		}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ms.client.ResourceV1().ResourceClaims("").Watch(ctx, o)
		}, func() cache.SharedIndexInformer {
			return resourceinformers.NewResourceClaimInformer(ms.client, metav1.NamespaceAll, 0, indexers)
		})
		_ = m.informer.SetTransform(trimClaim)
		if ms.claims.ExtendedResources {
			ms.addClassInformer(ctx, m)
		}
	default:
		m.informer = ms.typed(gvr.Resource, &metav1.PartialObjectMetadata{}, indexers, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ms.meta.Resource(gvr).Namespace("").List(ctx, o)
		}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ms.meta.Resource(gvr).Namespace("").Watch(ctx, o)
		}, func() cache.SharedIndexInformer {
			return metadatainformer.NewFilteredMetadataInformer(ms.meta, gvr, metav1.NamespaceAll, 0, indexers, nil).Informer()
		}, sharding.WithProbe(sharding.RawProbe(ms.client.Discovery().RESTClient(), gvr)))
		_ = m.informer.SetTransform(trimMeta)
	}
}

// typed is the informer of one counted type: unsharded, the one whole builds (client-go's,
// as always); sharded, one over the shard's range with the same object and indexers (opts:
// sharding.WithProbe for metadata-only types, whose lists lose ListMeta.ShardInfo).
func (ms *monitors) typed(resource string, obj runtime.Object, indexers cache.Indexers, list sharding.ListFunc, watchFn sharding.WatchFunc, whole func() cache.SharedIndexInformer, opts ...sharding.Option) cache.SharedIndexInformer {
	if ms.view == nil {
		return whole()
	}
	return ms.view.Informer(resource, obj, list, watchFn, nil, 0, indexers, opts...)
}

// addClassInformer adds to the claims monitor the DeviceClass informer feeding the cache of
// which extended resources each class provides. A class added, changed or deleted after the
// first list changes what claims are charged: the quotas counting claims are synced again.
func (ms *monitors) addClassInformer(ctx context.Context, m *monitor) {
	m.classes = resourceinformers.NewDeviceClassInformer(ms.client, 0, cache.Indexers{})
	_ = m.classes.SetTransform(trimDeviceClass)
	changed := cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(_ any, initial bool) {
			if !initial && m.synced.Load() {
				ms.notifyStateChange(m.gr)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*resourceapi.DeviceClass)
			n, ok2 := cur.(*resourceapi.DeviceClass)
			if ok1 && ok2 && m.synced.Load() && !equalPtr(o.Spec.ExtendedResourceName, n.Spec.ExtendedResourceName) {
				ms.notifyStateChange(m.gr)
			}
		},
		DeleteFunc: func(any) {
			if m.synced.Load() {
				ms.notifyStateChange(m.gr)
			}
		},
	}
	m.classMap = extendedresourcecache.NewExtendedResourceCache(klog.FromContext(ctx).WithValues("resource", "deviceclasses.resource.k8s.io"), changed)
	if _, err := m.classes.AddEventHandler(m.classMap); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot watch DeviceClasses")
	}
}

func equalPtr(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// describeResource formats a type for Events and logs: resource.group, or resource for the
// core group.
func describeResource(gr schema.GroupResource) string {
	if gr.Group == "" {
		return gr.Resource
	}
	return fmt.Sprintf("%s.%s", gr.Resource, gr.Group)
}
