package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	coreinformers "k8s.io/client-go/informers/core/v1"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	"k8s.io/klog/v2"
)

// sourceState is how far a resource type's informer has got.
type sourceState int

const (
	// stateStarting: listing, not yet past the sync timeout.
	stateStarting sourceState = iota
	// stateSynced: the cache holds every object; usage can be computed.
	stateSynced
	// stateFailing: not synced within the sync timeout (a conversion webhook down, an
	// aggregated API unreachable, no permission). Quotas keep their last value for it.
	stateFailing
	// stateUnknown: discovery does not (or cannot) say which version serves the type.
	stateUnknown
)

// source is one resource type's informer, started on demand the first time a quota tracks it.
type source struct {
	gr       schema.GroupResource
	gvr      schema.GroupVersionResource
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	synced   atomic.Bool
	timedOut atomic.Bool
	lastErr  atomic.Pointer[string]
	// inFailing says whether this source is counted in sources.failing, so that it is
	// counted in and out exactly once whatever order syncing and stopping happen in.
	inFailing atomic.Bool
	// classes is the DeviceClass informer of the claims source when claims are charged
	// extended resources (nil otherwise): which extended resources each class provides,
	// kept in classMap. Claims are counted only once both have synced.
	classes  cache.SharedIndexInformer
	classMap *extendedresourcecache.ExtendedResourceCache
}

func (s *source) hasSynced() bool {
	return s.informer.HasSynced() && (s.classes == nil || s.classes.HasSynced())
}

func (s *source) state() sourceState {
	switch {
	case s.synced.Load():
		return stateSynced
	case s.timedOut.Load():
		return stateFailing
	}
	return stateStarting
}

// reason explains why the type cannot be counted, for the Event.
func (s *source) reason() string {
	if e := s.lastErr.Load(); e != nil {
		return *e
	}
	return "its informer has not listed it yet"
}

// list returns the cached objects of one namespace.
func (s *source) list(namespace string) ([]any, error) {
	return s.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
}

// sources owns an informer per resource type that some quota tracks. Types with usage beyond
// a count (Pods, Services, claims) get typed informers trimmed to what the evaluators read;
// every other type is watched as metadata only, since counting needs nothing more. Each
// informer has its own stop, so one that never syncs stays alone with its trouble.
type sources struct {
	ctx     context.Context
	client  kubernetes.Interface
	meta    metadata.Interface
	timeout time.Duration
	claims  ClaimOptions
	// charge is what a Pod is charged: the Pods' cache keeps their totals under it.
	charge resourcehelper.PodResourcesOptions
	// handlers returns the replenishment handler of a type.
	handlers func(gr schema.GroupResource) cache.ResourceEventHandler
	// changed is called when a type's informer syncs or times out, so that the quotas
	// tracking it are synced again.
	changed func(gr schema.GroupResource)

	mu sync.Mutex
	// versions maps every namespaced type discovery found to the version to watch it in.
	versions map[schema.GroupResource]string
	// failedGroups are the API groups discovery could not read last time, with the error.
	failedGroups map[string]string
	byGR         map[schema.GroupResource]*source
	wg           sync.WaitGroup

	failing atomic.Int64
}

func newSources(ctx context.Context, client kubernetes.Interface, meta metadata.Interface, timeout time.Duration, claims ClaimOptions, charge resourcehelper.PodResourcesOptions) *sources {
	versions := map[schema.GroupResource]string{}
	for gr, v := range coreVersions {
		versions[gr] = v
	}
	return &sources{
		ctx:          ctx,
		client:       client,
		meta:         meta,
		timeout:      timeout,
		claims:       claims,
		charge:       charge,
		versions:     versions,
		failedGroups: map[string]string{},
		byGR:         map[schema.GroupResource]*source{},
	}
}

// get returns the source of gr, starting its informer if needed, with its state and, unless
// synced, why it cannot be counted.
func (s *sources) get(gr schema.GroupResource) (*source, sourceState, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if src, ok := s.byGR[gr]; ok {
		st := src.state()
		if st == stateSynced {
			return src, st, ""
		}
		return src, st, src.reason()
	}
	version, ok := s.versions[gr]
	if !ok {
		if err, failed := s.failedGroups[gr.Group]; failed {
			return nil, stateUnknown, "discovery of its API group failed: " + err
		}
		return nil, stateUnknown, "the apiserver does not serve it"
	}
	src := s.start(gr.WithVersion(version))
	return src, src.state(), src.reason()
}

// synced returns the source of gr if it is running and synced, without starting one.
func (s *sources) synced(gr schema.GroupResource) *source {
	s.mu.Lock()
	defer s.mu.Unlock()
	if src, ok := s.byGR[gr]; ok && src.synced.Load() {
		return src
	}
	return nil
}

// start builds and runs the informer of gvr; s.mu is held.
func (s *sources) start(gvr schema.GroupVersionResource) *source {
	ctx, cancel := context.WithCancel(s.ctx)
	src := &source{gr: gvr.GroupResource(), gvr: gvr, cancel: cancel}
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	switch src.gr {
	case podsResource:
		src.informer = coreinformers.NewPodInformer(s.client, metav1.NamespaceAll, 0, indexers)
		_ = src.informer.SetTransform(podTransform(s.charge))
	case servicesResource:
		src.informer = coreinformers.NewServiceInformer(s.client, metav1.NamespaceAll, 0, indexers)
		_ = src.informer.SetTransform(trimService)
	case pvcsResource:
		src.informer = coreinformers.NewPersistentVolumeClaimInformer(s.client, metav1.NamespaceAll, 0, indexers)
		_ = src.informer.SetTransform(trimMeta)
	case claimsResource:
		if gvr.Version != resourceapi.SchemeGroupVersion.Version {
			// Typed for the version the evaluator reads; an apiserver serving another one
			// as preferred still serves v1 (GA since 1.34).
			gvr.Version = resourceapi.SchemeGroupVersion.Version
			src.gvr = gvr
		}
		indexers[claimOwnerIndex] = indexClaimOwner
		src.informer = resourceinformers.NewResourceClaimInformer(s.client, metav1.NamespaceAll, 0, indexers)
		_ = src.informer.SetTransform(trimClaim)
		if s.claims.ExtendedResources {
			s.startClasses(ctx, src)
		}
	default:
		src.informer = metadatainformer.NewFilteredMetadataInformer(s.meta, gvr, metav1.NamespaceAll, 0, indexers, nil).Informer()
		_ = src.informer.SetTransform(trimMeta)
	}
	logger := klog.FromContext(ctx).WithValues("resource", src.gr.String())
	_ = src.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		msg := err.Error()
		src.lastErr.Store(&msg)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	if s.handlers != nil {
		if _, err := src.informer.AddEventHandler(s.handlers(src.gr)); err != nil {
			logger.Error(err, "Cannot watch for replenishment")
		}
	}
	s.byGR[src.gr] = src
	logger.V(2).Info("Starting informer", "version", gvr.Version)
	s.wg.Go(func() { src.informer.RunWithContext(ctx) })
	if src.classes != nil {
		s.wg.Go(func() { src.classes.RunWithContext(ctx) })
	}
	s.wg.Go(func() { s.awaitSync(ctx, src) })
	return src
}

// startClasses adds to the claims source the DeviceClass informer feeding the cache of
// which extended resources each class provides. A class added, changed or deleted after the
// first list changes what claims are charged: the quotas counting claims are synced again.
func (s *sources) startClasses(ctx context.Context, src *source) {
	src.classes = resourceinformers.NewDeviceClassInformer(s.client, 0, cache.Indexers{})
	_ = src.classes.SetTransform(trimDeviceClass)
	changed := cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(_ any, initial bool) {
			if !initial && src.synced.Load() {
				s.notify(src.gr)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*resourceapi.DeviceClass)
			n, ok2 := cur.(*resourceapi.DeviceClass)
			if ok1 && ok2 && src.synced.Load() && !equalPtr(o.Spec.ExtendedResourceName, n.Spec.ExtendedResourceName) {
				s.notify(src.gr)
			}
		},
		DeleteFunc: func(any) {
			if src.synced.Load() {
				s.notify(src.gr)
			}
		},
	}
	src.classMap = extendedresourcecache.NewExtendedResourceCache(klog.FromContext(ctx).WithValues("resource", "deviceclasses.resource.k8s.io"), changed)
	if _, err := src.classes.AddEventHandler(src.classMap); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot watch DeviceClasses")
	}
}

func equalPtr(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// awaitSync marks src synced or, after the timeout, failing, and tells the quotas either way.
// A failing informer keeps retrying on its own; once it syncs the quotas are told again.
func (s *sources) awaitSync(ctx context.Context, src *source) {
	timeout, cancel := context.WithTimeout(ctx, s.timeout)
	ok := cache.WaitForCacheSync(timeout.Done(), src.hasSynced)
	cancel()
	if !ok {
		if ctx.Err() != nil {
			return
		}
		src.timedOut.Store(true)
		if src.inFailing.CompareAndSwap(false, true) {
			s.failing.Add(1)
		}
		klog.FromContext(ctx).Info("Resource type cannot be counted yet; quotas keep their last value for it",
			"resource", src.gr.String(), "timeout", s.timeout, "reason", src.reason())
		s.notify(src.gr)
		if !cache.WaitForCacheSync(ctx.Done(), src.hasSynced) {
			return
		}
		if src.inFailing.CompareAndSwap(true, false) {
			s.failing.Add(-1)
		}
		klog.FromContext(ctx).Info("Resource type can be counted again", "resource", src.gr.String())
	}
	src.synced.Store(true)
	s.notify(src.gr)
}

func (s *sources) notify(gr schema.GroupResource) {
	if s.changed != nil {
		s.changed(gr)
	}
}

// setDiscovered replaces what discovery found and stops the informers of types that are no
// longer served (a CRD deleted), so that they do not retry forever. It returns the types that
// were not known before or are now served in another version: the quotas counting them need a
// sync.
func (s *sources) setDiscovered(found map[schema.GroupResource]string, failedGroups map[string]string) []schema.GroupResource {
	s.mu.Lock()
	defer s.mu.Unlock()
	var added []schema.GroupResource
	versions := map[schema.GroupResource]string{}
	for gr, v := range coreVersions {
		versions[gr] = v
	}
	for gr, v := range found {
		versions[gr] = v
	}
	// A group discovery could not read keeps what it had.
	for gr, v := range s.versions {
		if _, failed := failedGroups[gr.Group]; failed {
			if _, ok := versions[gr]; !ok {
				versions[gr] = v
			}
		}
	}
	for gr, v := range versions {
		old, ok := s.versions[gr]
		if !ok {
			added = append(added, gr)
			continue
		}
		if old != v {
			added = append(added, gr)
			if src, running := s.byGR[gr]; running {
				// The preferred version changed: watch the new one from now on.
				s.stop(src)
			}
		}
	}
	for gr, src := range s.byGR {
		if _, ok := versions[gr]; !ok {
			s.stop(src)
		}
	}
	s.versions = versions
	s.failedGroups = failedGroups
	return added
}

// retain stops the informers of types no quota tracks any longer, so that a cluster that once
// counted a type does not watch it forever. A quota that tracks it again restarts it.
func (s *sources) retain(needed map[schema.GroupResource]bool) []schema.GroupResource {
	s.mu.Lock()
	defer s.mu.Unlock()
	var stopped []schema.GroupResource
	for gr, src := range s.byGR {
		if !needed[gr] {
			s.stop(src)
			stopped = append(stopped, gr)
		}
	}
	return stopped
}

// stop ends one informer; s.mu is held.
func (s *sources) stop(src *source) {
	src.cancel()
	if src.inFailing.CompareAndSwap(true, false) {
		s.failing.Add(-1)
	}
	delete(s.byGR, src.gr)
}

// wait blocks until every informer goroutine has returned (after the context ended).
func (s *sources) wait() { s.wg.Wait() }

// describe formats a type for Events and logs: resource.group, or resource for the core group.
func describe(gr schema.GroupResource) string {
	if gr.Group == "" {
		return gr.Resource
	}
	return fmt.Sprintf("%s.%s", gr.Resource, gr.Group)
}

// ---- cache trimming: keep only what evaluators and replenishment read ----

func trimObjectMeta(m *metav1.ObjectMeta) {
	m.GenerateName = ""
	m.ManagedFields = nil
	m.Labels = nil
	m.OwnerReferences = nil
	m.Finalizers = nil
	// The beta StorageClass annotation decides a claim's class; nothing else is read.
	if c, ok := m.Annotations[v1.BetaStorageClassAnnotation]; ok {
		m.Annotations = map[string]string{v1.BetaStorageClassAnnotation: c}
	} else {
		m.Annotations = nil
	}
}

// trimMeta drops what no evaluator reads from any object with metadata. A metadata informer's
// objects also name their kind (always PartialObjectMetadata): nothing reads it.
func trimMeta(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.TypeMeta = metav1.TypeMeta{}
	}
	if o, ok := obj.(metav1.ObjectMetaAccessor); ok {
		trimObjectMeta(o.GetObjectMeta().(*metav1.ObjectMeta))
	}
	return obj, nil
}

// trimPod, for the Pods podTransform does not compact, keeps the fields Pod usage and scopes
// depend on: resources (containers, init containers, pod-level, overhead, what the kubelet
// allocated), phase, deletion, deadline, priority class, QoS class, affinity and resize
// conditions.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return obj, nil
	}
	trimObjectMeta(&pod.ObjectMeta)
	trimContainers := func(cs []v1.Container) []v1.Container {
		out := make([]v1.Container, len(cs))
		for i := range cs {
			out[i] = v1.Container{Name: cs[i].Name, Resources: cs[i].Resources, RestartPolicy: cs[i].RestartPolicy}
		}
		return out
	}
	trimStatuses := func(ss []v1.ContainerStatus) []v1.ContainerStatus {
		out := make([]v1.ContainerStatus, len(ss))
		for i := range ss {
			out[i] = v1.ContainerStatus{Name: ss[i].Name, Resources: ss[i].Resources, AllocatedResources: ss[i].AllocatedResources}
		}
		return out
	}
	var affinity *v1.Affinity
	if a := pod.Spec.Affinity; a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil) {
		affinity = &v1.Affinity{PodAffinity: a.PodAffinity, PodAntiAffinity: a.PodAntiAffinity}
	}
	pod.Spec = v1.PodSpec{
		Containers:            trimContainers(pod.Spec.Containers),
		InitContainers:        trimContainers(pod.Spec.InitContainers),
		Resources:             pod.Spec.Resources,
		Overhead:              pod.Spec.Overhead,
		ActiveDeadlineSeconds: pod.Spec.ActiveDeadlineSeconds,
		PriorityClassName:     pod.Spec.PriorityClassName,
		Affinity:              affinity,
	}
	var conditions []v1.PodCondition
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodResizePending || c.Type == v1.PodResizeInProgress {
			conditions = append(conditions, v1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason})
		}
	}
	// Which claim carries the Pod's extended resources: that claim is not charged them a
	// second time.
	var extendedClaim *v1.PodExtendedResourceClaimStatus
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		extendedClaim = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: st.ResourceClaimName}
	}
	pod.Status = v1.PodStatus{
		Phase:                       pod.Status.Phase,
		QOSClass:                    pod.Status.QOSClass,
		Conditions:                  conditions,
		ContainerStatuses:           trimStatuses(pod.Status.ContainerStatuses),
		InitContainerStatuses:       trimStatuses(pod.Status.InitContainerStatuses),
		Resources:                   pod.Status.Resources,
		AllocatedResources:          pod.Status.AllocatedResources,
		ExtendedResourceClaimStatus: extendedClaim,
	}
	return pod, nil
}

// trimService keeps the type and ports.
func trimService(obj any) (any, error) {
	svc, ok := obj.(*v1.Service)
	if !ok {
		return obj, nil
	}
	trimObjectMeta(&svc.ObjectMeta)
	svc.Spec = v1.ServiceSpec{
		Type:                          svc.Spec.Type,
		Ports:                         svc.Spec.Ports,
		AllocateLoadBalancerNodePorts: svc.Spec.AllocateLoadBalancerNodePorts,
	}
	svc.Status = v1.ServiceStatus{}
	return svc, nil
}
