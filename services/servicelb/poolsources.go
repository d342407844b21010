// The pool sources as the controller runs them: each enabled pool API's cache, whether its
// API is served, the pools parsed from all of them, and their status written back.

package servicelb

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
)

// Pool status retries: from poolRetryMin doubling to poolRetryMax.
const (
	poolRetryMin = 200 * time.Millisecond
	poolRetryMax = time.Minute
)

// poolFeed is one enabled pool API: its cache (empty until its informer is handed over) and
// whether its pools can be trusted, which needs the API served and the cache synced.
type poolFeed struct {
	src    poolsource.Source
	mu     sync.Mutex
	store  cache.Store
	synced func() bool // nil until an informer is handed over
	served bool
}

// known reports whether the feed's API is served and its cache synced.
func (f *poolFeed) known() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served && f.synced != nil && f.synced()
}

func (f *poolFeed) cache() cache.Store {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.store
}

// use makes inf the feed's cache; its API is served.
func (f *poolFeed) use(inf cache.SharedIndexInformer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store, f.synced, f.served = inf.GetStore(), inf.HasSynced, true
}

// setServed records whether the API is served; it reports whether that changed.
func (f *poolFeed) setServed(served bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	changed := f.served != served
	f.served = served
	return changed
}

// feed returns the enabled pool API named api, or nil.
func (c *Controller) feed(api string) *poolFeed {
	for _, f := range c.pools {
		if f.src.API().Name == api {
			return f
		}
	}
	return nil
}

func (c *Controller) poolHandlers() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.refreshPools() },
		UpdateFunc: c.onPoolUpdate,
		DeleteFunc: func(any) { c.refreshPools() },
	}
}

// onPoolUpdate refreshes the pools when a spec changed; status writes (ours), metadata edits
// and resyncs do not bump the generation and need nothing.
func (c *Controller) onPoolUpdate(oldObj, newObj any) {
	old, okOld := oldObj.(metav1.Object)
	cur, okCur := newObj.(metav1.Object)
	if okOld && okCur && old.GetGeneration() == cur.GetGeneration() {
		return
	}
	c.refreshPools()
}

// AddPoolInformer hands the controller the informer of pool API api (with the source's
// Transform set) before Run; Run waits for it as for the other caches. An API that is not
// enabled is ignored.
func (c *Controller) AddPoolInformer(api string, pools cache.SharedIndexInformer) {
	f := c.feed(api)
	if f == nil {
		return
	}
	c.handlers.Add(pools, c.poolHandlers())
	f.use(pools)
}

// SetPoolInformer is AddPoolInformer once the API appears after the start; the caller starts
// the informer after this call. Until then the controller runs without that API's pools:
// Services wait for addresses, and those being deleted or changing type are still cleaned up.
// The pools are refreshed at once and again once its objects have been handled, so a Service
// waits for no event that may never come.
func (c *Controller) SetPoolInformer(ctx context.Context, api string, pools cache.SharedIndexInformer) error {
	f := c.feed(api)
	if f == nil {
		return nil
	}
	reg, err := pools.AddEventHandler(c.poolHandlers())
	if err != nil {
		return err
	}
	f.use(pools)
	c.refreshPools()
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			c.refreshPools()
		}
	}()
	return nil
}

// SetPoolAPIServed tells the controller whether discovery lists pool API api. While it does
// not, every pool is unknown (see poolsKnown).
func (c *Controller) SetPoolAPIServed(api string, served bool) {
	if f := c.feed(api); f != nil && f.setServed(served) {
		c.refreshPools()
	}
}

// poolsKnown reports whether every enabled pool API is served and its cache synced. One
// unknown source makes all pools unknown: a Service may be a candidate of either; no
// address is moved or released for a pool reason and none is handed out.
func (c *Controller) poolsKnown() bool {
	for _, f := range c.pools {
		if !f.known() {
			return false
		}
	}
	return true
}

// refreshPools re-reads every pool from the caches and hands the result to the allocation
// state; every handled Service is then queued, so those holding an address no pool contains
// any more are moved, and those waiting try again.
func (c *Controller) refreshPools() {
	var parsed []poolsource.Parsed
	for _, f := range c.pools {
		for _, o := range f.cache().List() {
			p, err := f.src.Parse(o)
			if err != nil {
				utilruntime.HandleError(err)
				continue
			}
			parsed = append(parsed, p)
		}
	}
	restored, e := c.state.SetPools(poolsource.CheckOverlaps(parsed))
	c.apply(e)
	if !restored {
		return // Run queues nothing before the restore; the informers' adds queue all.
	}
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range svcs {
		if handles(svc, c.opts.LoadBalancerClass) {
			c.queue.Add(svc.Namespace + "/" + svc.Name)
		}
	}
}

// syncPoolStatus writes a pool's status (usage, and validity where its API has it) when it
// changed.
func (c *Controller) syncPoolStatus(ctx context.Context, key string) error {
	api, name := poolsource.APIOf(key)
	f := c.feed(api.Name)
	if f == nil {
		return nil
	}
	o, exists, err := f.cache().GetByKey(cache.ObjectName{Namespace: f.src.Namespace(), Name: name}.String())
	if err != nil || !exists {
		return err
	}
	p, stats := c.state.PoolStatus(key)
	if p == nil {
		return nil
	}
	err = f.src.WriteStatus(ctx, o, p, stats)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) {
		// The cache is behind a write (ours, or another writer's); retried with the
		// queue's backoff (poolRetryMin doubling to poolRetryMax) and dropped after its
		// retry cap: the next allocation change queues the pool again.
		c.metrics.conflicts.WithLabelValues(conflictPoolStatus).Inc()
	}
	return err
}
