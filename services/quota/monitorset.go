package quota

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/sharding"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
)

// monitors owns an informer per resource type that some quota tracks. Types with usage beyond
// a count (Pods, Services, claims) get typed informers trimmed to what the evaluators read;
// every other type is watched as metadata only, since counting needs nothing more. Each
// informer has its own stop, so one that never syncs stays alone with its trouble.
type monitors struct {
	ctx     context.Context
	client  kubernetes.Interface
	meta    metadata.Interface
	timeout time.Duration
	claims  ClaimOptions
	// charge is what a Pod is charged: the Pods' cache keeps their totals under it.
	charge resourcehelper.PodResourcesOptions
	// view, when sharded, builds every informer of a counted type for the shard's namespaces.
	view *sharding.View
	// replenishmentHandler returns the handler that gives usage back for a type.
	replenishmentHandler func(gr schema.GroupResource) cache.ResourceEventHandler
	// onStateChange is called when a type's informer syncs or times out, so that the quotas
	// tracking it are synced again.
	onStateChange func(gr schema.GroupResource)

	mu sync.Mutex
	// versions maps every namespaced type discovery found to the version to watch it in.
	versions map[schema.GroupResource]string
	// failedGroups are the API groups discovery could not read last time, with the error.
	failedGroups map[string]string
	byGR         map[schema.GroupResource]*monitor
	wg           sync.WaitGroup

	failing atomic.Int64
}

func newMonitors(ctx context.Context, client kubernetes.Interface, meta metadata.Interface, timeout time.Duration, claims ClaimOptions, charge resourcehelper.PodResourcesOptions) *monitors {
	return &monitors{
		ctx:          ctx,
		client:       client,
		meta:         meta,
		timeout:      timeout,
		claims:       claims,
		charge:       charge,
		versions:     coreVersionsAnd(nil),
		failedGroups: map[string]string{},
		byGR:         map[schema.GroupResource]*monitor{},
	}
}

// coreVersionsAnd returns the core types' versions, which need no discovery, and found's.
func coreVersionsAnd(found map[schema.GroupResource]string) map[schema.GroupResource]string {
	versions := map[schema.GroupResource]string{}
	for gr, v := range coreVersions {
		versions[gr] = v
	}
	for gr, v := range found {
		versions[gr] = v
	}
	return versions
}

// getOrStart returns the monitor of gr, starting its informer if needed, with its state and,
// unless synced, why it cannot be counted.
func (ms *monitors) getOrStart(gr schema.GroupResource) (*monitor, monitorState, string) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if m, ok := ms.byGR[gr]; ok {
		st := m.state()
		if st == stateSynced {
			return m, st, ""
		}
		return m, st, m.reason()
	}
	version, ok := ms.versions[gr]
	if !ok {
		if err, failed := ms.failedGroups[gr.Group]; failed {
			return nil, stateUnknown, "discovery of its API group failed: " + err
		}
		return nil, stateUnknown, "the apiserver does not serve it"
	}
	m := ms.start(gr.WithVersion(version))
	return m, m.state(), m.reason()
}

// syncedOnly returns the monitor of gr if it is running and synced, without starting one.
func (ms *monitors) syncedOnly(gr schema.GroupResource) *monitor {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if m, ok := ms.byGR[gr]; ok && m.synced.Load() {
		return m
	}
	return nil
}

// start builds and runs the informer of gvr; ms.mu is held.
func (ms *monitors) start(gvr schema.GroupVersionResource) *monitor {
	ctx, cancel := context.WithCancel(ms.ctx)
	m := &monitor{gr: gvr.GroupResource(), gvr: gvr, cancel: cancel}
	ms.newInformer(ctx, m, gvr)
	logger := klog.FromContext(ctx).WithValues("resource", m.gr.String())
	_ = m.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		msg := err.Error()
		m.lastErr.Store(&msg)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	if ms.replenishmentHandler != nil {
		if _, err := m.informer.AddEventHandler(ms.replenishmentHandler(m.gr)); err != nil {
			logger.Error(err, "Cannot watch for replenishment")
		}
	}
	ms.byGR[m.gr] = m
	logger.V(2).Info("Starting informer", "version", m.gvr.Version)
	ms.wg.Go(func() { m.informer.RunWithContext(ctx) })
	if m.classes != nil {
		ms.wg.Go(func() { m.classes.RunWithContext(ctx) })
	}
	ms.wg.Go(func() { ms.awaitSync(ctx, m) })
	return m
}

// awaitSync marks m synced or, after the timeout, failing, and tells the quotas either way.
// A failing informer keeps retrying on its own; once it syncs the quotas are told again.
func (ms *monitors) awaitSync(ctx context.Context, m *monitor) {
	timeout, cancel := context.WithTimeout(ctx, ms.timeout)
	ok := cache.WaitForCacheSync(timeout.Done(), m.hasSynced)
	cancel()
	if !ok && !ms.awaitLateSync(ctx, m) {
		return
	}
	m.synced.Store(true)
	ms.notifyStateChange(m.gr)
}

// awaitLateSync marks m failing, tells the quotas, and waits for it to sync after all; it
// reports whether it did before ctx ended.
func (ms *monitors) awaitLateSync(ctx context.Context, m *monitor) bool {
	if ctx.Err() != nil {
		return false
	}
	m.timedOut.Store(true)
	if m.countedFailing.CompareAndSwap(false, true) {
		ms.failing.Add(1)
	}
	klog.FromContext(ctx).Info("Resource type cannot be counted yet; quotas keep their last value for it",
		"resource", m.gr.String(), "timeout", ms.timeout, "reason", m.reason())
	ms.notifyStateChange(m.gr)
	if !cache.WaitForCacheSync(ctx.Done(), m.hasSynced) {
		return false
	}
	if m.countedFailing.CompareAndSwap(true, false) {
		ms.failing.Add(-1)
	}
	klog.FromContext(ctx).Info("Resource type can be counted again", "resource", m.gr.String())
	return true
}

func (ms *monitors) notifyStateChange(gr schema.GroupResource) {
	if ms.onStateChange != nil {
		ms.onStateChange(gr)
	}
}

// setServed replaces what discovery found and stops the informers of types that are no
// longer served (a CRD deleted), so that they do not retry forever. It returns the types that
// were not known before or are now served in another version: the quotas counting them need a
// sync.
func (ms *monitors) setServed(found map[schema.GroupResource]string, failedGroups map[string]string) []schema.GroupResource {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var added []schema.GroupResource
	versions := coreVersionsAnd(found)
	// A group discovery could not read keeps what it had.
	for gr, v := range ms.versions {
		if _, failed := failedGroups[gr.Group]; failed {
			if _, ok := versions[gr]; !ok {
				versions[gr] = v
			}
		}
	}
	for gr, v := range versions {
		old, ok := ms.versions[gr]
		if !ok {
			added = append(added, gr)
			continue
		}
		if old != v {
			added = append(added, gr)
			if m, running := ms.byGR[gr]; running {
				// The preferred version changed: watch the new one from now on.
				ms.stop(m)
			}
		}
	}
	for gr, m := range ms.byGR {
		if _, ok := versions[gr]; !ok {
			ms.stop(m)
		}
	}
	ms.versions = versions
	ms.failedGroups = failedGroups
	return added
}

// stopAllBut stops the informers of types no quota tracks any longer, so that a cluster that
// once counted a type does not watch it forever. A quota that tracks it again restarts it.
func (ms *monitors) stopAllBut(needed map[schema.GroupResource]bool) []schema.GroupResource {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var stopped []schema.GroupResource
	for gr, m := range ms.byGR {
		if !needed[gr] {
			ms.stop(m)
			stopped = append(stopped, gr)
		}
	}
	return stopped
}

// stop ends one informer; ms.mu is held.
func (ms *monitors) stop(m *monitor) {
	m.cancel()
	if m.countedFailing.CompareAndSwap(true, false) {
		ms.failing.Add(-1)
	}
	delete(ms.byGR, m.gr)
}

// wait blocks until every informer goroutine has returned (after the context ended).
func (ms *monitors) wait() { ms.wg.Wait() }
