// Package namespace is kube-controller-manager's namespace controller as a service of its
// own. When a namespace is deleted it removes everything in the namespace, Pods first, then
// every other namespaced resource the cluster serves (CRDs and aggregated APIs included),
// explains on the namespace's conditions and in Events what is left and what blocks, and
// finally removes the "kubernetes" finalizer so the apiserver deletes the namespace.
package namespace

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"golang.org/x/time/rate"

	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// podsResource is deleted, and must be gone, before anything else in a namespace: workloads
// still running may need their ConfigMaps, Secrets and ServiceAccount tokens to shut down
// cleanly (upstream's ordered namespace deletion, on by default since v1.33).
var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// Event reasons written on a namespace whose deletion is blocked; the message names what
// blocks it. They match the reason of the condition that says the same.
const (
	EventDiscoveryFailed       = ReasonDiscoveryFailed
	EventGVParsingFailed       = ReasonGVParsingFailed
	EventContentDeletionFailed = ReasonContentDeletionFailed
	EventSomeFinalizersRemain  = ReasonSomeFinalizersRemain
	// EventFinalizedWithUnavailableAPIs: the namespace was finalized although some API group
	// versions did not answer discovery, because they had been unavailable for longer than
	// --allow-deletion-with-unavailable-groups and their last good discovery served nothing
	// that can hold objects in a namespace. The message names them (kcm-split's).
	EventFinalizedWithUnavailableAPIs = "FinalizedWithUnavailableAPIs"
	// EventUpdateConflict: writes of the namespace's status or finalizers kept conflicting
	// with other writers past the retry bound of one sync (kcm-split's; upstream retries
	// without bound).
	EventUpdateConflict = "UpdateConflict"
)

// Controller deletes the content of terminating namespaces and finalizes them.
type Controller struct {
	namespaces kubernetesNamespaces
	recorder   record.EventRecorder
	opts       Options

	lister corelisters.NamespaceLister
	// handlers are the event-handler registrations; Run returns their failure, if any.
	handlers  informer.Handlers
	resources *resourceCache
	deleter   *deleter
	queue     *worker.Queue[string]
	metrics   *controllerMetrics
	now       func() time.Time

	mu sync.Mutex
	// seen records when this process first saw each namespace (by UID) with a deletion
	// timestamp; the grace period and the freshness of discovery count from there.
	seen map[types.UID]time.Time
	// conflicting records the namespaces (by UID) whose writes gave up on conflicts and have
	// not succeeded since: the Event about it is written once per episode.
	conflicting map[types.UID]bool
	// conflictBackoff is conflictBackoff outside unit tests.
	conflictBackoff wait.Backoff
	// podChecks counts, per namespace (by UID), the syncs in a row that found Pods still
	// terminating: the next look comes after podRecheck of it.
	podChecks map[types.UID]int

	// memory remembers each group version's last good discovery, for
	// Options.AllowDeletionWithUnavailableGroups.
	memory *apiMemory
	// refresh asks for a discovery soon (an APIService changed), so that the memory
	// holds a group's good state before it fails.
	refresh chan struct{}
	// store, if set, keeps the memory in the cluster for the next holder (store.go);
	// storeWake tells its loop a discovery was observed.
	store     *discoveryStore
	storeWake chan struct{}

	// foreign, if set, reports other writers of what this controller owns (foreign.go);
	// finalizing are the namespaces (by UID) this process finalized or is finalizing.
	foreign    *foreignWriters
	finalizing map[types.UID]bool
}

// recheckAfterWrite is how soon a namespace is looked at again after a sync changed its
// status while content remains: upstream syncs a namespace this long after every update
// of it, its own status writes included, and waits for its estimate only when nothing
// changed. Never slower than upstream means never waiting longer than this after a change.
const recheckAfterWrite = DeletionGracePeriod

// podRecheck is how soon a namespace whose Pods are still terminating is looked at again
// after the n-th such sync in a row: 1 s, then doubling, so Pods that stop quickly (most do,
// well before their grace period ends) let the rest of the content go at once, and Pods that
// take their time cost a handful of lists. The estimate (halfway to the deadline) still
// bounds it.
func podRecheck(n int) time.Duration {
	return time.Second << min(n, 10)
}

// kubernetesNamespaces is the part of the typed client the controller uses.
type kubernetesNamespaces interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1.Namespace, error)
	UpdateStatus(ctx context.Context, ns *v1.Namespace, opts metav1.UpdateOptions) (*v1.Namespace, error)
	Finalize(ctx context.Context, ns *v1.Namespace, opts metav1.UpdateOptions) (*v1.Namespace, error)
}

// New builds the controller and registers its event handlers; it starts nothing. content
// lists and deletes objects (the metadata client); discover returns the server's preferred
// resources, a list for every group version it reached (a partial result with
// *discovery.ErrGroupDiscoveryFailed is fine); cluster-scoped ones are left out here.
// Queue, reconcile and controller metrics go to reg (nil: none).
func New(
	namespaces coreinformers.NamespaceInformer,
	client kubernetes.Interface,
	content contentClient,
	discover func() ([]*metav1.APIResourceList, error),
	recorder record.EventRecorder,
	opts Options,
	reg prometheus.Registerer,
) *Controller {
	c := &Controller{
		namespaces: client.CoreV1().Namespaces(),
		recorder:   recorder,
		opts:       opts,
		lister:     namespaces.Lister(),
		resources:  newResourceCache(discover),
		deleter: &deleter{
			content:  content,
			pageSize: opts.PageSize,
			now:      time.Now,
			bulk:     make(chan struct{}, 2*resourceWorkers),
		},
		queue: worker.New(worker.Options[string]{
			Name:       QueueName,
			Controller: Name,
			// A namespace is never given up on: it would stay Terminating forever.
			MaxRetries:  -1,
			RateLimiter: rateLimiter(),
			Registerer:  reg,
		}),
		now:             time.Now,
		seen:            map[types.UID]time.Time{},
		conflicting:     map[types.UID]bool{},
		conflictBackoff: conflictBackoff,
		podChecks:       map[types.UID]int{},
		memory:          newAPIMemory(),
		refresh:         make(chan struct{}, 1),
		storeWake:       make(chan struct{}, 1),
		finalizing:      map[types.UID]bool{},
	}
	c.metrics = newMetrics(reg, c.lister)
	c.resources.observe = c.observeDiscovery
	c.handlers.AddWithResync(namespaces.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onChange(nil, obj) },
		UpdateFunc: c.onChange,
		DeleteFunc: c.onDelete,
	}, opts.SyncPeriod)
	return c
}

// rateLimiter is upstream's for this controller: failures back off from 5ms to at most a
// minute, so a broken API is retried at least every minute, and all retries together are
// held to 10/s.
func rateLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Minute),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// HasSynced reports whether the namespace informer has listed and this controller has seen
// every listed namespace; /readyz of a leader waits for it.
func (c *Controller) HasSynced() bool { return c.handlers.HasSynced() }

// Run waits for the cache, runs workers until ctx ends, then drains them.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return c.handlers.RunWhenSynced(ctx, "namespace controller", func(ctx context.Context) error {
		var wg sync.WaitGroup
		if c.opts.AllowDeletionWithUnavailableGroups > 0 {
			if c.store != nil {
				// What the previous holder kept is read before the first sync decides;
				// a read that fails is tried again by keepStore.
				c.loadStore(ctx)
				wg.Go(func() { c.keepStore(ctx) })
			}
			wg.Go(func() { c.refreshDiscovery(ctx) })
		}
		c.queue.Run(ctx, workers, c.sync)
		wg.Wait()
		return nil
	}, "workers", workers)
}

// discoveryRefreshPeriod is how often discovery runs without any namespace being deleted,
// when --allow-deletion-with-unavailable-groups is set: a group's last good discovery must
// be known before it fails. Aggregated discovery costs two requests.
const discoveryRefreshPeriod = time.Minute

// refreshDiscovery discovers at start, every discoveryRefreshPeriod and a second after an
// APIService changed (a burst of changes costs one discovery), until ctx ends.
func (c *Controller) refreshDiscovery(ctx context.Context) {
	tick := time.NewTicker(discoveryRefreshPeriod)
	defer tick.Stop()
	for {
		c.resources.get(c.now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-c.refresh:
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// observeDiscovery feeds every discovery into the memory of last good discoveries and the
// metrics.
func (c *Controller) observeDiscovery(started time.Time, lists []*metav1.APIResourceList, s *snapshot) {
	result := "complete"
	switch {
	case s.discoveryErr != nil && len(s.failedGVs) > 0:
		result = "partial"
	case s.discoveryErr != nil:
		result = "failed"
	}
	c.metrics.discoveries.WithLabelValues(result).Inc()
	if result == "failed" {
		return // nothing was learned about any group version
	}
	if c.memory.observe(started, lists, s.failedGVs) {
		// An API answers again: the namespaces it blocked need not wait for their backoff.
		c.enqueueBlocked()
	}
	select {
	case c.storeWake <- struct{}{}:
	default:
	}
	for state, n := range countByLastDiscovery(c.memory.unavailable(s.failedGVs)) {
		c.metrics.unavailable.WithLabelValues(state).Set(float64(n))
	}
}

// onChange enqueues a namespace that has a deletion timestamp. Updates are filtered: this
// controller's own status writes would otherwise sync every namespace once more after each
// sync, bypassing the wait for graceful termination; the sync that wrote sets when to look
// again instead (recheckAfterWrite, podRecheck). What matters here is the deletion itself, a
// change of finalizers (someone else finished), a new object under the name, and resyncs.
func (c *Controller) onChange(oldObj, newObj any) {
	ns, ok := newObj.(*v1.Namespace)
	if !ok || ns.DeletionTimestamp == nil {
		return
	}
	if old, ok := oldObj.(*v1.Namespace); ok {
		relevant := old.ResourceVersion == ns.ResourceVersion || // resync
			old.DeletionTimestamp == nil ||
			old.UID != ns.UID ||
			!slices.Equal(old.Spec.Finalizers, ns.Spec.Finalizers)
		if !relevant {
			return
		}
	}
	if wait := c.graceLeft(ns); wait > 0 {
		c.queue.AddAfter(ns.Name, wait)
		return
	}
	c.queue.Add(ns.Name)
}

func (c *Controller) onDelete(obj any) {
	tombstone := false
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, tombstone = d.Obj, true
	}
	ns, ok := obj.(*v1.Namespace)
	if !ok {
		return
	}
	c.mu.Lock()
	ours := c.finalizing[ns.UID]
	delete(c.seen, ns.UID)
	delete(c.conflicting, ns.UID)
	delete(c.podChecks, ns.UID)
	delete(c.finalizing, ns.UID)
	c.mu.Unlock()
	if c.foreign == nil {
		return
	}
	// The delete event carries the namespace as stored before the request that deleted it:
	// with the "kubernetes" finalizer still there, that request was a finalize. A tombstone's
	// state may be older than the last write: not proof.
	if !tombstone && !ours && ns.DeletionTimestamp != nil && slices.Contains(ns.Spec.Finalizers, v1.FinalizerKubernetes) {
		c.foreign.finalizedElsewhere(ns, metav1.NewTime(c.now()))
		return
	}
	c.foreign.forget(ns)
}

// firstSeen returns when this process first saw ns with a deletion timestamp.
func (c *Controller) firstSeen(ns *v1.Namespace) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.seen[ns.UID]
	if !ok {
		at = c.now()
		c.seen[ns.UID] = at
	}
	return at
}

func (c *Controller) graceLeft(ns *v1.Namespace) time.Duration {
	return c.opts.GracePeriod - c.now().Sub(c.firstSeen(ns))
}

// enqueueBlockedByDiscovery looks again at every terminating namespace whose deletion
// waits on discovery, at once: an APIService changed, so a failing API may be back or gone.
func (c *Controller) enqueueBlockedByDiscovery() {
	c.resources.invalidate()
	select {
	case c.refresh <- struct{}{}:
	default: // one is pending already
	}
	c.enqueueBlocked()
}

// enqueueBlocked adds every terminating namespace whose deletion waits on discovery.
func (c *Controller) enqueueBlocked() {
	all, err := c.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ns := range all {
		if ns.DeletionTimestamp == nil {
			continue
		}
		if i := indexOf(ns.Status.Conditions, v1.NamespaceDeletionDiscoveryFailure); i >= 0 && ns.Status.Conditions[i].Status == v1.ConditionTrue {
			c.queue.Add(ns.Name)
		}
	}
}

// sync makes one attempt at deleting namespace name: its content, then its finalizer.
func (c *Controller) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("namespace", name)
	ctx = klog.NewContext(ctx, logger)
	start := c.now()
	defer func() { logger.V(4).Info("Finished syncing namespace", "duration", c.now().Sub(start)) }()

	// Several controllers edit a terminating namespace; act on the latest state, not on the
	// cache's.
	ns, err := c.namespaces.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp == nil {
		return nil
	}
	seen := c.firstSeen(ns)
	if wait := c.graceLeft(ns); wait > 0 {
		return worker.RequeueAfter(wait)
	}

	ns, err = c.markTerminating(ctx, ns)
	if err != nil || ns == nil {
		return ignoreGone(err)
	}
	if !slices.Contains(ns.Spec.Finalizers, v1.FinalizerKubernetes) {
		return nil // finalized already
	}

	rep := c.deleteContent(ctx, ns, seen)
	if rep.stopped != "" {
		c.metrics.stopped.WithLabelValues(rep.stopped).Inc()
		logger.Info("Stopped deleting content: the namespace is no longer the one being deleted", "uid", ns.UID, "reason", rep.stopped)
		return nil
	}
	var excuseWait time.Duration
	if allowed := c.opts.AllowDeletionWithUnavailableGroups; allowed > 0 && len(rep.failedGVs) > 0 {
		rep.excused, excuseWait = excuse(c.memory.unavailable(rep.failedGVs), allowed, c.now())
	}
	ns, wrote, err := c.writeConditions(ctx, ns, rep)
	if err != nil || ns == nil {
		return ignoreGone(err)
	}
	pods := rep.remaining[podsResource] > 0
	checks := c.countPodChecks(ns.UID, pods)
	var d time.Duration
	if len(rep.remaining) > 0 {
		d = requeueDelay(rep.wait, c.opts.SyncPeriod)
		if pods {
			d = min(d, podRecheck(checks-1))
		}
		if wrote {
			d = min(d, recheckAfterWrite)
		}
	}
	if err := rep.failure(); err != nil {
		if excuseWait > 0 && rep.parseErr == nil && len(rep.contentErrs) == 0 {
			// Only groups that held nothing in namespaces block, and not for long enough
			// yet: look again when they have.
			if d == 0 || excuseWait < d {
				d = excuseWait
			}
			logger.V(2).Info("Blocked by unavailable APIs that held nothing in namespaces, checking again when allowed", "groupVersions", rep.failedGroups, "after", d)
			return worker.RequeueAfter(d)
		}
		return err
	}
	if len(rep.remaining) > 0 {
		logger.V(2).Info("Content remaining, checking again later", "estimate", rep.wait, "after", d, "podsTerminating", pods)
		return worker.RequeueAfter(d)
	}

	return c.finalize(ctx, ns, rep)
}

// markTerminating sets ns's phase to Terminating unless it is already; nil, nil as update.
func (c *Controller) markTerminating(ctx context.Context, ns *v1.Namespace) (*v1.Namespace, error) {
	return c.update(ctx, ns, func(ns *v1.Namespace) (*v1.Namespace, error) {
		if ns.Status.Phase == v1.NamespaceTerminating {
			return ns, nil
		}
		next := ns.DeepCopy()
		next.Status.Phase = v1.NamespaceTerminating
		return c.namespaces.UpdateStatus(ctx, next, metav1.UpdateOptions{})
	})
}

// finalize removes the kubernetes finalizer from ns, whose content rep found all gone, and
// records how long the deletion took.
func (c *Controller) finalize(ctx context.Context, ns *v1.Namespace, rep *report) error {
	logger := klog.FromContext(ctx)
	c.markFinalizing(ns.UID)
	ns, err := c.update(ctx, ns, func(ns *v1.Namespace) (*v1.Namespace, error) {
		next := ns.DeepCopy()
		next.Spec.Finalizers = slices.DeleteFunc(next.Spec.Finalizers, func(f v1.FinalizerName) bool { return f == v1.FinalizerKubernetes })
		return c.namespaces.Finalize(ctx, next, metav1.UpdateOptions{})
	})
	if err != nil || ns == nil {
		return ignoreGone(err)
	}
	took := c.now().Sub(ns.DeletionTimestamp.Time)
	c.metrics.duration.Observe(took.Seconds())
	if len(rep.excused) > 0 {
		c.metrics.finalizedUnavailable.Inc()
		logger.Info("Namespace finalized although some APIs are unavailable: they held nothing in namespaces when last discovered", "groupVersions", rep.failedGroups)
		if c.recorder != nil {
			c.recorder.Eventf(ns, v1.EventTypeWarning, EventFinalizedWithUnavailableAPIs,
				"Namespace finalized although these APIs do not answer discovery: unavailable for longer than %s (--%s) and, when last discovered, serving nothing that can hold objects in a namespace: %s",
				c.opts.AllowDeletionWithUnavailableGroups, FlagAllowDeletionWithUnavailableGroups, gvNames(rep.excused))
		}
	}
	logger.Info("Namespace finalized", "sinceDeletion", took.Round(time.Millisecond))
	return nil
}

// countPodChecks counts the syncs in a row of namespace uid that found Pods still
// terminating, and returns the count including this one (0 when pods is false).
func (c *Controller) countPodChecks(uid types.UID, pods bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !pods {
		delete(c.podChecks, uid)
		return 0
	}
	c.podChecks[uid]++
	return c.podChecks[uid]
}

// deleteContent deletes every namespaced resource's objects in ns: Pods first and alone,
// the rest once no Pod is left.
func (c *Controller) deleteContent(ctx context.Context, ns *v1.Namespace, seen time.Time) *report {
	snap := c.resources.get(seen)
	rep := newReport(snap)
	check := c.guard(ns)
	var rest []resource
	for _, r := range snap.resources {
		if r.GVR == podsResource {
			o := c.deleteAll(ctx, ns.Name, r, check)
			rep.add(o)
			if o.stopped != "" || o.err != nil || o.remaining > 0 {
				// Nothing else goes while a Pod may still be running.
				return rep
			}
			continue
		}
		rest = append(rest, r)
	}

	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, resourceWorkers)
	for _, r := range rest {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			o := c.deleteAll(ctx, ns.Name, r, check)
			mu.Lock()
			rep.add(o)
			mu.Unlock()
		})
	}
	wg.Wait()
	return rep
}

// guard returns the check run before every page of deletes: a live read (the cache may be
// behind) that the namespace of that name is still ns, by UID, and still being deleted. A
// namespace finalized by another writer and created again under the same name loses
// nothing: its content is not this sync's to delete.
func (c *Controller) guard(ns *v1.Namespace) guard {
	return func(ctx context.Context) error {
		cur, err := c.namespaces.Get(ctx, ns.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return &errStopped{reason: StopGone}
		case err != nil:
			return err
		case cur.UID != ns.UID || cur.DeletionTimestamp == nil:
			return &errStopped{reason: StopReplaced}
		}
		return nil
	}
}

func (c *Controller) deleteAll(ctx context.Context, ns string, r resource, check guard) outcome {
	o := c.deleter.deleteAll(ctx, ns, r, check)
	if o.deleted > 0 {
		c.metrics.deleted.WithLabelValues(resourceName(r.GVR)).Add(float64(o.deleted))
	}
	if o.err != nil {
		utilruntime.HandleErrorWithContext(ctx, o.err, "Deleting namespace content", "resource", r.GVR.String())
	}
	return o
}
