// Package tainteviction is kube-controller-manager's taint-eviction-controller: it deletes
// the Pods that do not tolerate the NoExecute taints of their Node, at once or when the
// smallest matching tolerationSeconds has passed. Which Nodes get NoExecute taints, and when,
// is the node lifecycle controller's business (package nodelifecycle); this controller only
// reads the taints, whoever put them there.
package tainteviction

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/services/nodelifecycle/internal/nodepods"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// Names this controller is known by, upstream's.
const (
	// Name is upstream's name of the controller (--controllers, the controller label of its
	// reconcile metrics), and as upstream its Events' source.
	Name = "taint-eviction-controller"
	// NodeQueueName is the queue of Nodes whose NoExecute taints changed.
	NodeQueueName = "noexec_taint_node"
	// PodQueueName is the queue of Pods whose Node, tolerations or deletion changed.
	PodQueueName = "noexec_taint_pod"
	// EvictionQueueName holds Pods whose eviction is due, or will be at a known time.
	EvictionQueueName = "noexec_taint_eviction"
	// ReasonEviction is the reason of the Events on a Pod marked for deletion or spared.
	ReasonEviction = "TaintManagerEviction"
)

// workers per queue: each item is a decision from the caches or a delete or two
// (upstream's number).
const workers = 8

// Controller is the taint eviction controller. A deadline is only a wake-up: when it comes,
// the decision is taken again from the current Pod and Node, so a taint removed or a
// toleration added in between cancels the eviction even if an event was missed.
type Controller struct {
	client     kubernetes.Interface
	recorder   record.EventRecorder
	metrics    *controllerMetrics
	now        func() time.Time
	nodes      corelisters.NodeLister
	pods       corelisters.PodLister
	podsByNode cache.Indexer
	// handlers are the event-handler registrations and the index; Run returns their
	// failure, if any.
	handlers informer.Handlers

	nodeQueue  *worker.Queue[string]
	podQueue   *worker.Queue[string]
	evictQueue *worker.Queue[string]

	mu        sync.Mutex
	scheduled map[string]*scheduledEviction
}

// New builds the controller and registers its event handlers on the informers, which it
// may share with other controllers; it starts nothing. Its Events go to recorder, its
// metrics to reg (nil: none).
func New(nodes coreinformers.NodeInformer, pods coreinformers.PodInformer, client kubernetes.Interface,
	recorder record.EventRecorder, reg prometheus.Registerer) *Controller {
	c := &Controller{
		client: client, recorder: recorder, metrics: newMetrics(reg), now: time.Now,
		nodes: nodes.Lister(), pods: pods.Lister(),
		nodeQueue:  worker.New(worker.Options[string]{Name: NodeQueueName, Controller: Name, Registerer: reg}),
		podQueue:   worker.New(worker.Options[string]{Name: PodQueueName, Controller: Name, Registerer: reg}),
		evictQueue: worker.New(worker.Options[string]{Name: EvictionQueueName, Controller: Name, Registerer: reg}),
		scheduled:  map[string]*scheduledEviction{},
	}
	podsByNode, err := nodepods.AddIndex(pods.Informer())
	c.handlers.Track(nil, err)
	c.podsByNode = podsByNode

	c.handlers.Add(nodes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok && len(noExecuteTaints(n)) > 0 {
				c.nodeQueue.Add(n.Name)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := cur.(*v1.Node)
			if ok1 && ok2 && !equality.Semantic.DeepEqual(noExecuteTaints(o), noExecuteTaints(n)) {
				c.nodeQueue.Add(n.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*v1.Node); ok {
				c.nodeQueue.Add(n.Name)
			}
		},
	})
	c.handlers.Add(pods.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*v1.Pod); ok && p.Spec.NodeName != "" {
				c.podQueue.Add(nodepods.Key(p))
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Pod)
			p, ok2 := cur.(*v1.Pod)
			if ok1 && ok2 && (o.Spec.NodeName != p.Spec.NodeName ||
				(o.DeletionTimestamp == nil) != (p.DeletionTimestamp == nil) ||
				!equality.Semantic.DeepEqual(o.Spec.Tolerations, p.Spec.Tolerations)) {
				c.podQueue.Add(nodepods.Key(p))
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*v1.Pod); ok {
				c.podQueue.Add(nodepods.Key(p))
			}
		},
	})
	return c
}

// HasSynced reports whether the informers have listed and the handlers have seen every
// listed object; /readyz of a leader waits for it.
func (c *Controller) HasSynced() bool { return c.handlers.HasSynced() }

// Run waits for the caches and runs the workers until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.nodeQueue.ShutDown()
	defer c.podQueue.ShutDown()
	defer c.evictQueue.ShutDown()
	return c.handlers.RunWhenSynced(ctx, "taint eviction controller", func(ctx context.Context) error {
		var wg sync.WaitGroup
		wg.Go(func() { c.nodeQueue.Run(ctx, workers, c.syncNode) })
		wg.Go(func() { c.podQueue.Run(ctx, workers, c.syncPod) })
		wg.Go(func() { c.evictQueue.Run(ctx, workers, c.evict) })
		wg.Wait()
		return nil
	})
}
