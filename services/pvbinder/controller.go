// Package pvbinder is kube-controller-manager's PersistentVolume binder as a service of its
// own: it binds PersistentVolumeClaims to PersistentVolumes (static and pre-bound), asks
// external provisioners for volumes (the CSI driver for an in-tree plugin migrated to CSI),
// runs the kubernetes.io/host-path provisioner and deleter (for development on one node)
// and recycler Pods for the Recycle policy (NFS and hostPath volumes),
// applies the default StorageClass to class-less claims, releases PVs whose claims are gone
// by their reclaim policy and marks claims Lost when their PV disappears. Annotations,
// phases, events and metrics are upstream's.
//
// # Never a double bind
//
// A PV is bound to a claim by writing its claimRef with an Update conditioned on the
// resourceVersion the binder read, in which the claimRef was empty: if anything else (another
// worker, a previous leader still finishing, a user) changed the PV since, the API server
// refuses the write with a conflict and nothing is bound. So a PV's claimRef is set from
// empty exactly once per binding, and a claim's spec.volumeName likewise (conditioned on the
// claim's version). Within one process, claims choose PVs under one mutex and reserve the
// PV they choose until their bind ends, so two workers never even attempt the same PV; all
// writes to one PV are serialised by a per-PV lock and use the newest version this process
// has seen (assumed), so the binder does not conflict with itself.
//
// A claim's binding is its spec.volumeName; a claimRef on a PV whose claim names another
// volume is a reservation left by an interrupted bind, and the volume sync undoes it.
//
// # Crash safety
//
// A bind writes, in order: PV claimRef (+ bound-by-controller), PV phase Bound, claim
// volumeName (+ bind-completed, bound-by-controller), claim phase Bound. Each step is
// idempotent and derived from what is stored, so a restart after any of them finishes the
// bind: a PV whose claimRef names the claim is always preferred by that claim, a claim with
// bind-completed is completed from its volumeName, and a PV whose claim is gone is released.
package pvbinder

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/keymutex"

	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
	"github.com/kcm-split/kcm-split/shared/writecache"
)

// pvLockStripes is the number of locks PV names are hashed onto: far more than the workers
// of both queues (2 × --concurrent-pv-binder-syncs) that can hold one, so two PVs rarely
// share a lock, for 8 bytes each.
const pvLockStripes = 1024

// Controller binds claims to volumes.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	opts     Options
	metrics  *binderMetrics

	pvLister    corelisters.PersistentVolumeLister
	claimLister corelisters.PersistentVolumeClaimLister
	classLister storagelisters.StorageClassLister
	// pods are indexed by the claims they use: which Pods a claim waits for.
	pods      cache.Indexer
	migration csiMigration
	// hostPathBase is where host-path volumes are made (hostPathBase; a test's own directory
	// in unit tests).
	hostPathBase string
	// recyclers make recycler Pods; inFlight are the recycles under way.
	recyclers recyclers
	inFlight  recycling
	// runCtx ends when Run returns: what outlives one sync (recycler event forwarding) ends
	// with it. Set by Run.
	runCtx context.Context
	// initErr is a setting New could not apply; Run returns it.
	initErr error
	// ops times provisions and deletions for the volume_operation_* metrics.
	ops *operationTimes
	// handlers are the event-handler registrations; Run returns their failure, if any.
	handlers informer.Handlers

	volumeQueue *worker.Queue[string]
	claimQueue  *worker.Queue[string]

	// volumes and claims hold what this controller wrote until its informer delivers it. Reads
	// merge them over the cache, so a bind's second write (PV status after claimRef) is based on
	// the first one's result instead of conflicting, and a just-bound PV never looks Available.
	volumes *writecache.Cache[*v1.PersistentVolume]
	claims  *writecache.Cache[*v1.PersistentVolumeClaim]
	// pvLocks serialises work on one PV across the workers of both queues, so the volume
	// worker and a claim worker never write the same PV at once and conflict. The locks are
	// striped: two PVs may share one (they then only wait for each other), so whoever holds
	// a PV's lock must never take another's.
	pvLocks keymutex.KeyMutex
	waiting *waitingClaims

	// matchMu makes choosing a PV and reserving it one step, across claim workers.
	matchMu sync.Mutex
	// reserved maps a PV name to the claim whose bind is writing it.
	reserved map[string]types.UID
	// rebindRefused holds the claims told why their previous volume is not given back
	// (under matchMu): one Event per claim, forgotten when the claim is deleted.
	rebindRefused map[types.UID]struct{}
}

// New builds the controller and registers its event handlers; it starts nothing. Queue,
// reconcile and pv_collector metrics go to reg (nil: none).
func New(
	pvs coreinformers.PersistentVolumeInformer,
	claims coreinformers.PersistentVolumeClaimInformer,
	classes storageinformers.StorageClassInformer,
	pods coreinformers.PodInformer,
	client kubernetes.Interface,
	recorder record.EventRecorder,
	opts Options,
	reg prometheus.Registerer,
) *Controller {
	c := &Controller{
		client:       client,
		recorder:     recorder,
		opts:         opts,
		pvLister:     pvs.Lister(),
		claimLister:  claims.Lister(),
		classLister:  classes.Lister(),
		pods:         pods.Informer().GetIndexer(),
		hostPathBase: hostPathBase,
		migration:    newCSIMigration(),
		volumeQueue:  worker.New(worker.Options[string]{Name: VolumeQueueName, Controller: Name, Registerer: reg}),
		claimQueue:   worker.New(worker.Options[string]{Name: ClaimQueueName, Controller: Name, Registerer: reg}),
		volumes:      writecache.New[*v1.PersistentVolume](),
		claims:       writecache.New[*v1.PersistentVolumeClaim](),
		pvLocks:      keymutex.NewHashed(pvLockStripes),
		waiting:      newWaitingClaims(),
		reserved:     map[string]types.UID{},
	}
	c.rebindRefused = map[types.UID]struct{}{}
	c.metrics = newBinderMetrics(reg, c.pvLister, c.claimLister)
	c.ops = newOperationTimes(c.metrics)
	c.recyclers, c.initErr = newRecyclers(opts)
	// Fails only on an informer already started (Run returns the error).
	c.handlers.Track(pods.Informer().HasSynced, pods.Informer().AddIndexers(cache.Indexers{podClaimIndex: podClaimKeys}))
	c.handlers.Add(pods.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onPodAdd,
		UpdateFunc: func(_, obj any) { c.onRecyclerPod(obj) },
		DeleteFunc: c.onRecyclerPod,
	})
	c.handlers.Add(pvs.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onVolume(obj) },
		UpdateFunc: func(_, obj any) { c.onVolume(obj) },
		DeleteFunc: c.onVolumeDelete,
	})
	c.handlers.Add(claims.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onClaimAdd,
		UpdateFunc: c.onClaimUpdate,
		DeleteFunc: c.onClaimDelete,
	})
	c.handlers.Add(classes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onClass,
		UpdateFunc: func(_, obj any) { c.onClass(obj) },
	})
	return c
}

// HasSynced reports whether every informer has listed and its handler seen every object.
func (c *Controller) HasSynced() bool { return c.handlers.HasSynced() }

// Run waits for the caches and runs workers (per queue) until ctx ends, with a resync of
// every object each sync period. It returns nil when ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer c.volumeQueue.ShutDown()
	defer c.claimQueue.ShutDown()
	if c.initErr != nil {
		return c.initErr
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.runCtx = ctx
	return c.handlers.RunWhenSynced(ctx, "persistent volume binder", func(ctx context.Context) error {
		var wg sync.WaitGroup
		wg.Go(func() { wait.UntilWithContext(ctx, c.resync, c.opts.SyncPeriod) })
		wg.Go(func() { c.volumeQueue.Run(ctx, workers, c.syncVolumeKey) })
		wg.Go(func() { c.claimQueue.Run(ctx, workers, c.syncClaimKey) })
		wg.Wait()
		return nil
	}, "workers", workers, "syncPeriod", c.opts.SyncPeriod)
}

// resync queues every PV and claim: the safety net for anything an event did not bring up.
// A resync of objects in their desired state writes nothing.
func (c *Controller) resync(ctx context.Context) {
	pvs, err := c.pvLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot list PersistentVolumes for resync")
	}
	for _, pv := range pvs {
		c.volumeQueue.Add(pv.Name)
	}
	claims, err := c.claimLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot list PersistentVolumeClaims for resync")
	}
	for _, claim := range claims {
		c.claimQueue.Add(claimKey(claim.Namespace, claim.Name))
	}
}

// background is the context of work that outlives a sync: Run's, or (in tests calling syncs
// directly) one that never ends.
func (c *Controller) background() context.Context {
	if c.runCtx != nil {
		return c.runCtx
	}
	return context.Background()
}

// ---- reads: informer cache merged with what this process wrote ----

// volume returns the newest known version of a PV, or a NotFound error.
func (c *Controller) volume(name string) (*v1.PersistentVolume, error) {
	pv, err := c.pvLister.Get(name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			c.volumes.Forget(name)
		}
		return nil, err
	}
	pv, _ = c.volumes.Latest(name, pv)
	return pv, nil
}

// claim returns the newest known version of a claim (key ns/name), or a NotFound error.
func (c *Controller) claim(key string) (*v1.PersistentVolumeClaim, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	claim, err := c.claimLister.PersistentVolumeClaims(ns).Get(name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			c.claims.Forget(key)
		}
		return nil, err
	}
	claim, _ = c.claims.Latest(key, claim)
	return claim, nil
}

// listVolumes returns every PV in its newest known version.
func (c *Controller) listVolumes() ([]*v1.PersistentVolume, error) {
	pvs, err := c.pvLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for i, pv := range pvs {
		pvs[i], _ = c.volumes.Latest(pv.Name, pv)
	}
	return pvs, nil
}

// ---- reservations ----

// reserve promises PV name to claim uid for the duration of a bind; false if another
// claim's bind holds it.
func (c *Controller) reserve(name string, uid types.UID) bool {
	c.matchMu.Lock()
	defer c.matchMu.Unlock()
	return c.reserveLocked(name, uid)
}

func (c *Controller) reserveLocked(name string, uid types.UID) bool {
	if holder, ok := c.reserved[name]; ok && holder != uid {
		return false
	}
	c.reserved[name] = uid
	return true
}

func (c *Controller) release(name string, uid types.UID) {
	c.matchMu.Lock()
	defer c.matchMu.Unlock()
	if c.reserved[name] == uid {
		delete(c.reserved, name)
	}
}
