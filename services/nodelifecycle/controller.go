// Package nodelifecycle is kube-controller-manager's node lifecycle controller as a service
// of its own; the binary also runs the taint-eviction controller (package tainteviction) and,
// when asked, node IPAM (package ipam) beside it. It watches every Node's signs of life
// (Ready heartbeats and Leases in kube-node-lease), marks silent Nodes Unknown, keeps the
// condition NoSchedule taints in line with the conditions, puts NoExecute taints on Nodes
// that are not Ready at a per-zone rate that slows or stops when a zone (or the whole
// cluster) looks disrupted rather than dead, and marks the Pods of unreachable Nodes not
// Ready. Deleting the Pods that do not tolerate those taints is the taint-eviction
// controller's part.
package nodelifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	coordinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/services/nodelifecycle/internal/nodepods"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// Event reasons, upstream's, plus kcm-split's zone events. The eviction Events are the
// taint-eviction controller's (tainteviction.ReasonEviction).
const (
	ReasonRegisteredNode = "RegisteredNode"
	ReasonRemovingNode   = "RemovingNode"
	ReasonNodeNotReady   = "NodeNotReady"

	// ReasonZoneDisrupted: a zone entered PartialDisruption or FullDisruption; the message
	// says what happens to NoExecute tainting there.
	ReasonZoneDisrupted = "ZoneDisrupted"
	// ReasonZoneNormal: a disrupted zone is back to Normal.
	ReasonZoneNormal = "ZoneNormal"
	// ReasonAllZonesDown: no zone has a Ready Node; tainting stopped everywhere.
	ReasonAllZonesDown = "AllZonesDown"
	// ReasonAllZonesDownEnded: some Node is Ready again; tainting resumes after fresh grace
	// periods.
	ReasonAllZonesDownEnded = "AllZonesDownEnded"
	// ReasonPartitionSuspected (partition.go) is the fourth zone Event.
)

// Worker counts. Node and Pod work is a patch or two per item and most items are no-ops, so
// a few workers suffice (upstream's numbers).
const (
	nodeWorkers = 8
	podWorkers  = 4
	// healthWorkers bound the parallel Node status writes of one round of checks, as
	// upstream's.
	healthWorkers = 8
	// minRoundSpacing keeps rounds of checks apart when deadlines and events come in
	// bursts: each round reads every Node, so a thousand deadlines a second must not mean a
	// thousand rounds. It is also the worst extra delay a deadline can see.
	minRoundSpacing = 100 * time.Millisecond
	// deadlineSlack wakes the monitor just after a deadline rather than on it, so that the
	// check "past the deadline" holds on the first try.
	deadlineSlack = 5 * time.Millisecond
	// taintRetryPeriod is how often queued NoExecute taints are retried while the zone's
	// rate allows them (upstream's 100 ms).
	taintRetryPeriod = 100 * time.Millisecond
)

// zoneEventObject is the object zone Events are recorded on: zones have no object of their
// own, and the namespace holding the Nodes' heartbeats is cluster-scoped, stable, and where
// one looks for node health. The Events land in "default":
// `kubectl get events --field-selector involvedObject.name=kube-node-lease`. They carry no
// UID (reading the namespace would need one more RBAC rule), so `kubectl describe namespace`
// does not list them.
var zoneEventObject = &v1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: v1.NamespaceNodeLease}

// Controller is the node lifecycle controller.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	opts     Options
	now      func() time.Time
	metrics  *controllerMetrics

	nodes      corelisters.NodeLister
	leases     coordlisters.LeaseLister
	pods       corelisters.PodLister
	podsByNode cache.Indexer
	// handlers are the event-handler registrations and the index; Run returns their
	// failure, if any.
	handlers informer.Handlers

	health    *healthTracker
	partition *partitionGuard
	nodeQueue *worker.Queue[string]
	podQueue  *worker.Queue[string]

	// checkRequested asks the monitor for a round of checks soon; tainterWake wakes the
	// NoExecute tainter.
	checkRequested chan struct{}
	tainterWake    chan struct{}

	mu      sync.Mutex // guards zones, allDown, inherited and inheritAll
	zones   map[string]*zone
	allDown bool
	// inherited is each zone's last NoExecute taint by the previous leader, and inheritAll
	// this term's start if that could not be read (handover.go): a zone's first taint of
	// the term waits for the rate after it. Only with --keep-eviction-pace.
	inherited  map[string]time.Time
	inheritAll time.Time
	// state, if set, keeps what a handover must not forget (handover.go).
	state *stateKeeper

	// Only the monitor goroutine touches these.
	known map[string]bool
}

// zone is one failure domain's state and NoExecute queue.
type zone struct {
	state   ZoneState
	tainter *zoneTainter
}

// New builds the controller and registers its event handlers; it starts nothing. The lease
// informer needs only the kube-node-lease namespace. recorder records as upstream's
// node-controller. Metrics go to reg (nil: none).
func New(
	nodes coreinformers.NodeInformer,
	leases coordinformers.LeaseInformer,
	pods coreinformers.PodInformer,
	client kubernetes.Interface,
	recorder record.EventRecorder,
	opts Options,
	reg prometheus.Registerer,
) *Controller {
	c := &Controller{
		client:   client,
		recorder: recorder,
		opts:     opts,
		now:      time.Now,
		metrics:  newMetrics(reg),
		nodes:    nodes.Lister(),
		leases:   leases.Lister(),
		pods:     pods.Lister(),
		nodeQueue: worker.New(worker.Options[string]{
			Name: NodeQueueName, Controller: Name, Registerer: reg,
		}),
		podQueue: worker.New(worker.Options[string]{
			Name: PodQueueName, Controller: Name, Registerer: reg,
		}),
		checkRequested: make(chan struct{}, 1),
		tainterWake:    make(chan struct{}, 1),
		zones:          map[string]*zone{},
		known:          map[string]bool{},
	}
	c.health = newHealthTracker(func() time.Time { return c.now() })
	c.partition = newPartitionGuard(opts)
	// A term starts with no episode, whatever the registry kept from an earlier term.
	c.metrics.partition.Set(0)
	podsByNode, err := nodepods.AddIndex(pods.Informer())
	c.handlers.Track(nil, err)
	c.podsByNode = podsByNode

	c.handlers.Add(nodes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onNodeAdd,
		UpdateFunc: c.onNodeUpdate,
		DeleteFunc: c.onNodeDelete,
	})
	c.handlers.Add(leases.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onLease,
		UpdateFunc: func(_, cur any) { c.onLease(cur) },
	})
	c.handlers.Add(pods.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*v1.Pod); ok && pod.Spec.NodeName != "" {
				c.podQueue.Add(nodepods.Key(pod))
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Pod)
			p, ok2 := cur.(*v1.Pod)
			if ok1 && ok2 && p.Spec.NodeName != "" && p.Spec.NodeName != o.Spec.NodeName {
				c.podQueue.Add(nodepods.Key(p))
			}
		},
	})
	return c
}

// HasSynced reports whether the informers have listed and the handlers have seen every
// listed object; /readyz of a leader waits for it.
func (c *Controller) HasSynced() bool { return c.handlers.HasSynced() }

// Run waits for the caches and runs the monitor, the tainter and the workers until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.nodeQueue.ShutDown()
	defer c.podQueue.ShutDown()
	return c.handlers.RunWhenSynced(ctx, "node lifecycle controller", func(ctx context.Context) error {
		var wg sync.WaitGroup
		if c.state != nil {
			// Before the first round: what the previous leader kept decides how it starts.
			c.loadState(ctx)
			wg.Go(func() { c.keepState(ctx) })
		}
		wg.Go(func() { c.nodeQueue.Run(ctx, nodeWorkers, c.syncNode) })
		wg.Go(func() { c.podQueue.Run(ctx, podWorkers, c.syncPod) })
		wg.Go(func() { c.runTainter(ctx) })
		wg.Go(func() { c.runMonitor(ctx) })
		wg.Wait()
		return nil
	}, "monitorPeriod", c.opts.MonitorPeriod, "gracePeriod", c.opts.MonitorGracePeriod,
		"startupGracePeriod", c.opts.StartupGracePeriod)
}
