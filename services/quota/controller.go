package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/keymutex"

	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/metrics"
	"github.com/kcm-split/kcm-split/shared/worker"
	"github.com/kcm-split/kcm-split/shared/writecache"
)

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
	// chargeRecheck is how long after a status update that raised usage the quota is synced again.
	chargeRecheck time.Duration

	quotas corelisters.ResourceQuotaLister
	// handlers is the quota informer's registration; Run returns its failure, if any.
	handlers informer.Handlers
	monitors *monitors

	primary  *worker.Queue[string]
	priority *worker.Queue[string]
	// locks serialise syncs of one quota: it can sit in both queues at once, and two
	// concurrent syncs of it would only race each other into a write conflict. Striped: two
	// quotas may share a lock (they then only wait for each other); a sync holds one only.
	locks   keymutex.KeyMutex
	metrics *controllerMetrics

	// discoveryRequests asks the discovery loop for an early run (a quota counts a type
	// discovery has not seen yet).
	discoveryRequests chan struct{}
	// monitorsStarted: discovery has run once and the informers the quotas need are started.
	monitorsStarted atomic.Bool

	// warned holds, per quota key, the resource types an Event has been written about and
	// not yet recovered: one Event per breakage rather than one per sync.
	warnedMu sync.Mutex
	warned   map[string]map[schema.GroupResource]bool

	// written is what this controller last wrote per quota key, until the informer shows it.
	written writecache.Cache[*v1.ResourceQuota]

	// staleness is how long each quota's usage has waited to be counted in full.
	staleness *staleness
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
		client:            client,
		recorder:          recorder,
		opts:              opts,
		discover:          discover,
		now:               time.Now,
		chargeRecheck:     chargeRecheck,
		quotas:            quotas.Lister(),
		discoveryRequests: make(chan struct{}, 1),
		locks:             keymutex.NewHashed(lockStripes),
		warned:            map[string]map[schema.GroupResource]bool{},
		primary: worker.New(worker.Options[string]{
			Name: QueuePrimary, Controller: Name, Registerer: reg,
		}),
		priority: worker.New(worker.Options[string]{
			Name: QueuePriority, Controller: Name, Registerer: reg,
		}),
	}
	c.monitors = newMonitors(context.Background(), client, meta, opts.InformerSyncTimeout, opts.Claims, opts.PodResources)
	c.monitors.view = opts.View
	c.monitors.replenishmentHandler = c.replenishmentHandler
	c.monitors.onStateChange = c.enqueueTracking
	c.metrics = newMetrics(reg, func() float64 { return float64(c.monitors.failing.Load()) })
	// c.now is read at each scrape: a test may replace it after New.
	c.staleness = newStaleness(func() time.Time { return c.now() })
	if reg != nil {
		c.staleness = metrics.Register(reg, c.staleness)
	}

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
	return c.handlers.HasSynced() && c.monitorsStarted.Load()
}

// Run discovers the API, starts the informers the existing quotas need, then runs the workers
// of both queues, the periodic full recalculation and rediscovery until ctx ends. It is the one
// Run not framed by handlers.RunWhenSynced: discovery must start before the quotas' cache has
// synced, so that the two round trips overlap at cold start.
func (c *Controller) Run(ctx context.Context) error {
	defer c.primary.ShutDown()
	defer c.priority.ShutDown()
	if err := c.handlers.Err(); err != nil {
		return fmt.Errorf("registering event handlers: %w", err)
	}
	logger := klog.FromContext(ctx)
	logger.Info("Starting resource quota controller", "workers", c.opts.ConcurrentSyncs, "syncPeriod", c.opts.SyncPeriod)
	defer logger.Info("Shutting down resource quota controller")

	c.monitors.ctx = ctx
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		c.monitors.wait()
	}()
	if !c.startMonitorsAndDiscover(ctx, &wg) {
		return nil
	}
	c.monitorsStarted.Store(true)

	wg.Go(func() { c.discoveryLoop(ctx) })
	if c.opts.SyncPeriod > 0 {
		wg.Go(func() { c.fullRecalculationLoop(ctx) })
	}
	wg.Go(func() { c.priority.Run(ctx, c.opts.ConcurrentSyncs, c.syncQuota) })
	c.primary.Run(ctx, c.opts.ConcurrentSyncs, c.syncQuota)
	return nil
}
