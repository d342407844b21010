package quota

import (
	"context"
	"errors"
	"fmt"
	resourcehelper "k8s.io/component-helpers/resource"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/keymutex"

	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
	"github.com/kcm-split/kcm-split/shared/writecache"
)

// unknownRecheck is how soon a quota naming a type discovery has not found is synced again.
const unknownRecheck = 5 * time.Second

// ReasonCannotCount is the reason of the warning Event on a quota one of whose resource types
// cannot be counted.
const ReasonCannotCount = "CannotCountResource"

// DiscoverFunc returns the namespaced resource types the apiserver serves, each with the
// version to watch it in, and the API groups it could not discover, with the error. A partial
// result comes with a nil error and the failed groups filled in.
type DiscoverFunc func() (map[schema.GroupResource]string, map[string]string, error)

// lockStripes is the number of locks quota keys are hashed onto: far more than the workers
// of both queues that can hold one, so two quotas rarely share a lock, for 8 bytes each.
const lockStripes = 1024

// Controller keeps the status of every ResourceQuota right.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	opts     Options
	discover DiscoverFunc
	now      func() time.Time

	quotas corelisters.ResourceQuotaLister
	// handlers is the quota informer's registration; Run returns its failure, if any.
	handlers informer.Handlers
	sources  *sources

	primary  *worker.Queue[string]
	priority *worker.Queue[string]
	// locks serialise syncs of one quota: it can sit in both queues at once, and two
	// concurrent syncs of it would only race each other into a write conflict. Striped: two
	// quotas may share a lock (they then only wait for each other); a sync holds one only.
	locks   keymutex.KeyMutex
	metrics *controllerMetrics

	// rediscover asks the discovery loop for an early run (a quota counts a type discovery
	// has not seen yet).
	rediscover chan struct{}
	warmedUp   atomic.Bool

	// warned holds, per quota key, the resource types an Event has been written about and
	// not yet recovered: one Event per breakage rather than one per sync.
	warnedMu sync.Mutex
	warned   map[string]map[schema.GroupResource]bool

	// written is what this controller last wrote per quota key, until the informer shows it.
	written writecache.Cache[*v1.ResourceQuota]
}

// New builds the controller and registers its handlers on the quota informer; it starts
// nothing. Informers of counted types are started on demand, from Run's context. Queue and
// controller metrics go to reg (nil: none).
func New(
	quotas coreinformers.ResourceQuotaInformer,
	client kubernetes.Interface,
	meta metadata.Interface,
	discover DiscoverFunc,
	recorder record.EventRecorder,
	opts Options,
	reg prometheus.Registerer,
) *Controller {
	c := &Controller{
		client:     client,
		recorder:   recorder,
		opts:       opts,
		discover:   discover,
		now:        time.Now,
		quotas:     quotas.Lister(),
		rediscover: make(chan struct{}, 1),
		locks:      keymutex.NewHashed(lockStripes),
		warned:     map[string]map[schema.GroupResource]bool{},
		primary: worker.New(worker.Options[string]{
			Name: QueuePrimary, Controller: ControllerID, Registerer: reg,
		}),
		priority: worker.New(worker.Options[string]{
			Name: QueuePriority, Controller: ControllerID, Registerer: reg,
		}),
	}
	c.sources = newSources(context.Background(), client, meta, opts.SourceSyncTimeout, opts.Claims, opts.PodResources)
	c.sources.handlers = c.replenisher
	c.sources.changed = c.enqueueTracking
	c.metrics = newMetrics(reg, func() float64 { return float64(c.sources.failing.Load()) })

	c.handlers.Add(quotas.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onQuotaAdd,
		UpdateFunc: c.onQuotaUpdate,
		DeleteFunc: c.onQuotaDelete,
	})
	return c
}

// HasSynced reports whether the quota informer has listed, discovery has run once and the
// counted types' informers are started; /readyz of a leader waits for it.
func (c *Controller) HasSynced() bool {
	return c.handlers.HasSynced() && c.warmedUp.Load()
}

// Run discovers the API, starts the informers the existing quotas need, then runs the workers
// of both queues, the periodic full recalculation and rediscovery until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.primary.ShutDown()
	defer c.priority.ShutDown()
	if err := c.handlers.Err(); err != nil {
		return fmt.Errorf("registering event handlers: %w", err)
	}
	logger := klog.FromContext(ctx)
	logger.Info("Starting resource quota controller", "workers", c.opts.ConcurrentSyncs, "syncPeriod", c.opts.SyncPeriod)
	defer logger.Info("Shutting down resource quota controller")

	c.sources.ctx = ctx
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		c.sources.wait()
	}()
	// Discovery (a round trip) runs while the quotas list. The core types need no discovery,
	// so their informers (Pods, the longest list) start as soon as the quotas say which are
	// counted; the types only discovery can place follow once it has answered.
	discovered := make(chan struct{})
	wg.Go(func() {
		defer close(discovered)
		c.discoverTypes(ctx)
	})
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.handlers.Synced()...) {
		return nil
	}
	c.startSources(ctx)
	select {
	case <-discovered:
	case <-ctx.Done():
		return nil
	}
	c.startSources(ctx)
	c.warmedUp.Store(true)

	wg.Go(func() { c.discoveryLoop(ctx) })
	if c.opts.SyncPeriod > 0 {
		wg.Go(func() {
			t := time.NewTicker(c.opts.SyncPeriod)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					c.enqueueAll(ctx)
				}
			}
		})
	}
	wg.Go(func() { c.priority.Run(ctx, c.opts.ConcurrentSyncs, c.syncQuota) })
	c.primary.Run(ctx, c.opts.ConcurrentSyncs, c.syncQuota)
	return nil
}

// startSources starts the informer of every type a quota tracks. It does not wait for them:
// a quota is synced as soon as every type it tracks has synced (or given up), so one slow or
// broken type never holds back the quotas that do not count it.
func (c *Controller) startSources(ctx context.Context) {
	all, err := c.quotas.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot list quotas")
		return
	}
	started := map[schema.GroupResource]bool{}
	for _, rq := range all {
		for gr := range plan(rq.Spec.Hard, c.opts.Claims) {
			if !started[gr] {
				started[gr] = true
				c.sources.get(gr)
			}
		}
	}
}

// ---- event handlers ----

func key(rq *v1.ResourceQuota) string { return rq.Namespace + "/" + rq.Name }

func (c *Controller) onQuotaAdd(obj any) {
	rq, ok := obj.(*v1.ResourceQuota)
	if !ok {
		return
	}
	if needsPriority(rq, c.opts.Claims) {
		c.priority.Add(key(rq))
		return
	}
	c.primary.Add(key(rq))
}

// onQuotaUpdate reacts only to a change of spec.hard: status updates, ours and admission's,
// are by far the most frequent and never need a sync.
func (c *Controller) onQuotaUpdate(old, cur any) {
	o, ok1 := old.(*v1.ResourceQuota)
	n, ok2 := cur.(*v1.ResourceQuota)
	if !ok1 || !ok2 || apiequality.Semantic.DeepEqual(o.Spec.Hard, n.Spec.Hard) {
		return
	}
	c.onQuotaAdd(n)
}

func (c *Controller) onQuotaDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if rq, ok := obj.(*v1.ResourceQuota); ok {
		c.warnedMu.Lock()
		delete(c.warned, key(rq))
		c.warnedMu.Unlock()
	}
}

// replenisher returns the handler of one counted type. Creations need no sync (admission
// charged them); deletions and usage-changing updates give usage back at once.
func (c *Controller) replenisher(gr schema.GroupResource) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			if usageChanged(gr, old, cur, c.now(), c.opts.PodResources) {
				c.replenish(gr, namespaceOf(cur))
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			c.replenish(gr, namespaceOf(obj))
		},
	}
}

func namespaceOf(obj any) string {
	if o, ok := obj.(metav1.Object); ok {
		return o.GetNamespace()
	}
	return ""
}

// usageChanged reports whether an update of an object of gr can change any quota's usage.
// Plain counts change only on create and delete.
func usageChanged(gr schema.GroupResource, old, cur any, now time.Time, charge resourcehelper.PodResourcesOptions) bool {
	switch gr {
	case podsResource:
		o, ok1 := old.(*v1.Pod)
		n, ok2 := cur.(*v1.Pod)
		return ok1 && ok2 && podUsageChanged(o, n, now, charge)
	case servicesResource:
		o, ok1 := old.(*v1.Service)
		n, ok2 := cur.(*v1.Service)
		return ok1 && ok2 && serviceUsageChanged(o, n)
	case pvcsResource:
		o, ok1 := old.(*v1.PersistentVolumeClaim)
		n, ok2 := cur.(*v1.PersistentVolumeClaim)
		return ok1 && ok2 && pvcUsageChanged(o, n)
	case claimsResource:
		o, ok1 := old.(*resourceapi.ResourceClaim)
		n, ok2 := cur.(*resourceapi.ResourceClaim)
		return ok1 && ok2 && claimUsageChanged(o, n)
	}
	return false
}

// replenish queues the quotas of namespace that track gr, and only those. They go to the
// priority queue: usage given back unblocks creates admission is refusing right now, which
// must not wait behind a full recalculation of every quota.
func (c *Controller) replenish(gr schema.GroupResource, namespace string) {
	if namespace == "" {
		return
	}
	rqs, err := c.quotas.ResourceQuotas(namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, rq := range rqs {
		if tracksResource(rq.Spec.Hard, gr, c.opts.Claims) || tracksResource(rq.Status.Hard, gr, c.opts.Claims) {
			c.priority.Add(key(rq))
		}
	}
}

// enqueueTracking queues every quota tracking gr: its informer has just synced or given up.
func (c *Controller) enqueueTracking(gr schema.GroupResource) {
	rqs, err := c.quotas.List(labels.Everything())
	if err != nil {
		return
	}
	for _, rq := range rqs {
		if tracksResource(rq.Spec.Hard, gr, c.opts.Claims) {
			c.priority.Add(key(rq))
		}
	}
}

// enqueueAll queues every quota for a full recalculation.
func (c *Controller) enqueueAll(ctx context.Context) {
	rqs, err := c.quotas.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot list quotas for the full recalculation")
		return
	}
	for _, rq := range rqs {
		c.primary.Add(key(rq))
	}
	klog.FromContext(ctx).V(4).Info("Queued every quota for a full recalculation", "quotas", len(rqs))
}

// ---- discovery ----

// discoveryLoop rediscovers every period, and early (at most every second) when asked.
func (c *Controller) discoveryLoop(ctx context.Context) {
	t := time.NewTicker(c.opts.DiscoveryPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.rediscover:
		}
		c.runDiscovery(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (c *Controller) triggerDiscovery() {
	select {
	case c.rediscover <- struct{}{}:
	default:
	}
}

func (c *Controller) runDiscovery(ctx context.Context) {
	if c.discoverTypes(ctx) {
		c.stopUnneeded(ctx)
	}
}

// discoverTypes asks discovery which version serves each type and reports whether it
// answered. It stops only the informers of types no longer served, never one for want of a
// quota: the first run overlaps the quotas' list, which may not be complete yet.
func (c *Controller) discoverTypes(ctx context.Context) bool {
	if c.discover == nil {
		return false
	}
	found, failed, err := c.discover()
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Discovery failed; counting the types found before")
		return false
	}
	if len(failed) > 0 {
		klog.FromContext(ctx).V(2).Info("Discovery of some API groups failed; their types keep the last version found", "groups", failed)
	}
	for _, gr := range c.sources.setDiscovered(found, failed) {
		c.enqueueTracking(gr)
	}
	return true
}

// stopUnneeded stops the informers of types no quota tracks any longer; it runs with each
// discovery, so an informer outlives its last quota by at most a discovery period.
func (c *Controller) stopUnneeded(ctx context.Context) {
	all, err := c.quotas.List(labels.Everything())
	if err != nil {
		return
	}
	needed := map[schema.GroupResource]bool{}
	for _, rq := range all {
		for gr := range plan(rq.Spec.Hard, c.opts.Claims) {
			needed[gr] = true
		}
	}
	for _, gr := range c.sources.retain(needed) {
		klog.FromContext(ctx).V(2).Info("Stopped the informer of a type no quota counts any longer", "resource", describe(gr))
	}
}

// ---- sync ----

// problem is a resource type a sync could not count.
type problem struct {
	gr     schema.GroupResource
	names  []v1.ResourceName
	state  sourceState
	reason string
}

// syncQuota recomputes the usage of the quota named by key (namespace/name) from the
// informers' caches and writes its status when it differs. Resource types that cannot be
// counted keep their last usage; the rest is published all the same.
func (c *Controller) syncQuota(ctx context.Context, qkey string) error {
	c.locks.LockKey(qkey)
	defer c.locks.UnlockKey(qkey)
	namespace, name, err := cache.SplitMetaNamespaceKey(qkey)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping malformed key", "key", qkey)
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("resourceQuota", qkey)
	start := time.Now()
	defer func() { logger.V(4).Info("Finished syncing resource quota", "duration", time.Since(start)) }()

	rq, err := c.quotas.ResourceQuotas(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.written.Forget(qkey)
		return nil
	}
	if err != nil {
		c.metrics.syncs.WithLabelValues(OutcomeError).Inc()
		return err
	}
	// A second event for the same quota often comes before the informer has delivered our
	// own last write: syncing from the stale copy would write again and lose a conflict.
	rq, _ = c.written.Latest(qkey, rq)

	now := c.now()
	scopes := scopeRequirements(&rq.Spec)
	fresh := v1.ResourceList{}
	var problems []problem
	var counted []schema.GroupResource
	var recheck time.Duration
	work := plan(rq.Spec.Hard, c.opts.Claims)
	for gr := range work {
		// A type still listing (its informer just started) is waited for: the quota is
		// queued again the moment it syncs or gives up, and syncing now would only publish
		// an incomplete status to be rewritten a moment later.
		if _, state, _ := c.sources.get(gr); state == stateStarting {
			c.metrics.syncs.WithLabelValues(OutcomeDeferred).Inc()
			logger.V(4).Info("Waiting for a resource type's informer", "resource", describe(gr))
			return nil
		}
	}
	claims := c.claimEvaluator()
	for gr, names := range work {
		src, state, reason := c.sources.get(gr)
		if state == stateUnknown && gr == claimsResource {
			// Where the apiserver serves no ResourceClaims, upstream has no claim evaluator:
			// an extended resource is the Pods' alone, and only the names claims alone
			// measure cannot be counted.
			names = slices.DeleteFunc(slices.Clone(names), func(n v1.ResourceName) bool { return claimSharesWithPods(n, c.opts.Claims) })
			if len(names) == 0 {
				continue
			}
		}
		if state != stateSynced {
			if state == stateUnknown {
				// A CRD created moments ago may not be served yet: ask discovery again and
				// look back in a while (a typo costs one cached sync every few seconds).
				c.triggerDiscovery()
				if recheck == 0 || unknownRecheck < recheck {
					recheck = unknownRecheck
				}
			}
			problems = append(problems, problem{gr: gr, names: names, state: state, reason: reason})
			continue
		}
		objs, err := src.list(namespace)
		if err != nil {
			problems = append(problems, problem{gr: gr, names: names, state: stateFailing, reason: err.Error()})
			continue
		}
		used, after := calculate(evaluatorFor(gr, c.opts.PodResources, claims), objs, names, scopes, now)
		for n, q := range used {
			// Pods and claims both charge extended resources: usage is their sum.
			if sum, ok := fresh[n]; ok {
				q.Add(sum)
			}
			fresh[n] = q
		}
		if after > 0 && (recheck == 0 || after < recheck) {
			recheck = after
		}
		counted = append(counted, gr)
	}
	// A name measured from several types keeps its last value when any of them failed.
	for _, p := range problems {
		for _, n := range p.names {
			delete(fresh, n)
		}
	}
	c.report(rq, counted, problems)

	status := desiredStatus(rq, fresh)
	outcome := OutcomeUnchanged
	if statusChanged(rq, status) {
		updated := rq.DeepCopy()
		updated.Status = status
		stored, err := c.client.CoreV1().ResourceQuotas(namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		if err != nil {
			if apierrors.IsConflict(err) {
				c.metrics.syncs.WithLabelValues(OutcomeConflict).Inc()
			} else {
				c.metrics.syncs.WithLabelValues(OutcomeError).Inc()
			}
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		// Kept until a sync reads it, in place of the informer's copy, which has no
		// managed fields either (see run).
		stored.ManagedFields = nil
		c.written.Wrote(qkey, rq.ResourceVersion, stored)
		outcome = OutcomeUpdated
		logger.V(4).Info("Updated quota status", "used", status.Used)
	}
	if len(problems) > 0 {
		outcome = OutcomePartial
	}
	c.metrics.syncs.WithLabelValues(outcome).Inc()
	if recheck > 0 {
		return worker.RequeueAfter(recheck)
	}
	return nil
}

// claimEvaluator is what charges ResourceClaims now: the DeviceClass mapping and claim index
// of the claims source and the Pods' cache, when they have synced.
func (c *Controller) claimEvaluator() claimEvaluator {
	e := claimEvaluator{opts: c.opts.Claims, charge: c.opts.PodResources}
	if !c.opts.Claims.ExtendedResources {
		return e
	}
	if src := c.sources.synced(claimsResource); src != nil {
		e.classes = src.classMap
		indexer := src.informer.GetIndexer()
		e.ownedBy = func(namespace string, uid types.UID) []*resourceapi.ResourceClaim {
			objs, err := indexer.ByIndex(claimOwnerIndex, claimOwnerKey(namespace, uid))
			if err != nil {
				return nil
			}
			out := make([]*resourceapi.ResourceClaim, 0, len(objs))
			for _, o := range objs {
				if claim, ok := o.(*resourceapi.ResourceClaim); ok {
					out = append(out, claim)
				}
			}
			return out
		}
	}
	if src := c.sources.synced(podsResource); src != nil {
		indexer := src.informer.GetIndexer()
		e.pod = func(namespace, name string) *v1.Pod {
			obj, ok, err := indexer.GetByKey(namespace + "/" + name)
			if err != nil || !ok {
				return nil
			}
			pod, _ := obj.(*v1.Pod)
			return pod
		}
	}
	return e
}

// report writes a warning Event the first time a resource type of the quota cannot be counted
// (once its informer has had its chance), and forgets it once it is counted again.
func (c *Controller) report(rq *v1.ResourceQuota, counted []schema.GroupResource, problems []problem) {
	k := key(rq)
	c.warnedMu.Lock()
	defer c.warnedMu.Unlock()
	warned := c.warned[k]
	for _, gr := range counted {
		delete(warned, gr)
	}
	for _, p := range problems {
		if p.state == stateStarting || warned[p.gr] {
			continue
		}
		if warned == nil {
			warned = map[schema.GroupResource]bool{}
			c.warned[k] = warned
		}
		warned[p.gr] = true
		names := make([]string, len(p.names))
		for i, n := range p.names {
			names[i] = string(n)
		}
		sort.Strings(names)
		c.recorder.Eventf(rq, v1.EventTypeWarning, ReasonCannotCount,
			"Cannot count %s (%s); status.used keeps its last value for %s until it can be counted again",
			describe(p.gr), truncate(p.reason, 300), strings.Join(names, ", "))
	}
	if len(warned) == 0 {
		delete(c.warned, k)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// discoverWith lists the namespaced types that can be listed and watched, each in its
// preferred version. Subresources and types quota never counts are left out.
func discoverWith(d discovery.DiscoveryInterface) DiscoverFunc {
	return func() (map[schema.GroupResource]string, map[string]string, error) {
		lists, err := d.ServerPreferredNamespacedResources()
		failed := map[string]string{}
		var groupErr *discovery.ErrGroupDiscoveryFailed
		switch {
		case err == nil:
		case errors.As(err, &groupErr):
			for gv, e := range groupErr.Groups {
				failed[gv.Group] = e.Error()
			}
		case len(lists) == 0:
			return nil, nil, err
		}
		found := map[schema.GroupResource]string{}
		for _, list := range lists {
			gv, perr := schema.ParseGroupVersion(list.GroupVersion)
			if perr != nil {
				continue
			}
			for _, r := range list.APIResources {
				if !quotable(gv.Group, r) {
					continue
				}
				found[schema.GroupResource{Group: gv.Group, Resource: r.Name}] = gv.Version
			}
		}
		return found, failed, nil
	}
}
