// Package nodelifecycle is kube-controller-manager's node lifecycle controller, with the
// taint-eviction controller in the same binary, as a service of its own. It watches every
// Node's signs of life (Ready heartbeats and Leases in kube-node-lease), marks silent Nodes
// Unknown, keeps the condition NoSchedule taints in line with the conditions, puts NoExecute
// taints on Nodes that are not Ready at a per-zone rate that slows or stops when a zone (or
// the whole cluster) looks disrupted rather than dead, marks the Pods of unreachable Nodes
// not Ready, and deletes Pods that do not tolerate their Node's NoExecute taints.
package nodelifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	coordinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// Event reasons, upstream's, plus kcm-split's zone events.
const (
	ReasonRegisteredNode = "RegisteredNode"
	ReasonRemovingNode   = "RemovingNode"
	ReasonNodeNotReady   = "NodeNotReady"
	ReasonEviction       = "TaintManagerEviction"

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
)

// Worker counts. Node and Pod work is a patch or two per item and most items are no-ops, so
// a few workers suffice (upstream's numbers).
const (
	nodeWorkers     = 8
	podWorkers      = 4
	evictionWorkers = 8
	// healthWorkers bound the parallel Node status writes of one pass, as upstream's.
	healthWorkers = 8
	// minPassSpacing keeps passes apart when deadlines and events come in bursts: each
	// pass reads every Node, so a thousand deadlines a second must not mean a thousand
	// passes. It is also the worst extra delay a deadline can see.
	minPassSpacing = 100 * time.Millisecond
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
	// handlers are the event-handler registrations (the evictor's too) and the index;
	// Run returns their failure, if any.
	handlers informer.Handlers

	health    *healthTracker
	nodeQueue *worker.Queue[string]
	podQueue  *worker.Queue[string]
	evictor   *evictor

	// kick asks the monitor for a pass soon; tainterKick wakes the NoExecute tainter.
	kick        chan struct{}
	tainterKick chan struct{}

	mu      sync.Mutex // guards zones and allDown
	zones   map[string]*zone
	allDown bool

	// Only the monitor goroutine touches these.
	known map[string]bool
}

// zone is one failure domain's state and NoExecute queue.
type zone struct {
	state   ZoneState
	tainter *zoneTainter
}

// nodeNameIndex indexes Pods by spec.nodeName.
const nodeNameIndex = "spec.nodeName"

// New builds the controller and registers its event handlers; it starts nothing. The lease
// informer needs only the kube-node-lease namespace. nodeRecorder records as upstream's
// node-controller, evictionRecorder as its taint-eviction-controller. Metrics go to reg
// (nil: none).
func New(
	nodes coreinformers.NodeInformer,
	leases coordinformers.LeaseInformer,
	pods coreinformers.PodInformer,
	client kubernetes.Interface,
	nodeRecorder, evictionRecorder record.EventRecorder,
	opts Options,
	reg prometheus.Registerer,
) *Controller {
	c := &Controller{
		client:   client,
		recorder: nodeRecorder,
		opts:     opts,
		now:      time.Now,
		metrics:  newMetrics(reg),
		nodes:    nodes.Lister(),
		leases:   leases.Lister(),
		pods:     pods.Lister(),
		nodeQueue: worker.New(worker.Options[string]{
			Name: NodeQueueName, Controller: ControllerID, Registerer: reg,
		}),
		podQueue: worker.New(worker.Options[string]{
			Name: PodQueueName, Controller: ControllerID, Registerer: reg,
		}),
		kick:        make(chan struct{}, 1),
		tainterKick: make(chan struct{}, 1),
		zones:       map[string]*zone{},
		known:       map[string]bool{},
	}
	c.health = newHealthTracker(func() time.Time { return c.now() })
	podInf := pods.Informer()
	if err := podInf.AddIndexers(cache.Indexers{nodeNameIndex: indexByNodeName}); err != nil {
		// Another component of this process added the same index already.
		if _, exists := podInf.GetIndexer().GetIndexers()[nodeNameIndex]; !exists {
			c.handlers.Track(nil, err)
		}
	}
	c.podsByNode = podInf.GetIndexer()

	c.handlers.Add(nodes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onNodeAdd,
		UpdateFunc: c.onNodeUpdate,
		DeleteFunc: c.onNodeDelete,
	})
	c.handlers.Add(leases.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onLease,
		UpdateFunc: func(_, cur any) { c.onLease(cur) },
	})
	c.handlers.Add(podInf, cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*v1.Pod); ok && pod.Spec.NodeName != "" {
				c.podQueue.Add(podKey(pod))
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Pod)
			p, ok2 := cur.(*v1.Pod)
			if ok1 && ok2 && p.Spec.NodeName != "" && p.Spec.NodeName != o.Spec.NodeName {
				c.podQueue.Add(podKey(p))
			}
		},
	})
	if opts.TaintEviction {
		c.evictor = newEvictor(client, evictionRecorder, nodes, pods, c.podsByNode, &c.handlers, c.metrics, reg, func() time.Time { return c.now() })
	}
	return c
}

func indexByNodeName(obj any) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

func podKey(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }

// HasSynced reports whether the informers have listed and the handlers have seen every
// listed object; /readyz of a leader waits for it.
func (c *Controller) HasSynced() bool { return c.handlers.HasSynced() }

func (c *Controller) onNodeAdd(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	c.health.observeNode(node)
	c.nodeQueue.Add(node.Name)
	c.poke()
}

func (c *Controller) onNodeUpdate(old, cur any) {
	o, ok1 := old.(*v1.Node)
	n, ok2 := cur.(*v1.Node)
	if !ok1 || !ok2 {
		return
	}
	c.health.observeNode(n)
	if o.Spec.Unschedulable != n.Spec.Unschedulable ||
		!equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
		!equality.Semantic.DeepEqual(desiredNoScheduleKeys(o), desiredNoScheduleKeys(n)) ||
		betaLabelsToSet(n) != nil {
		c.nodeQueue.Add(n.Name)
	}
	// A Ready change made by someone else (a kubelet reporting NotReady, or Ready again
	// after an outage) is acted on now, not at the next period: Pods, taints and zone
	// states follow at once.
	if readyStatus(o) != readyStatus(n) || zoneKey(o) != zoneKey(n) {
		c.poke()
	}
}

func (c *Controller) onNodeDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if node, ok := obj.(*v1.Node); ok {
		c.health.forget(node.Name)
		c.poke()
	}
}

func (c *Controller) onLease(obj any) {
	if lease, ok := obj.(*coordv1.Lease); ok {
		c.health.observeLease(lease)
	}
}

// readyStatus is node's Ready condition status, "" when it has none.
func readyStatus(node *v1.Node) v1.ConditionStatus {
	if r := readyCondition(&node.Status); r != nil {
		return r.Status
	}
	return ""
}

// poke asks the monitor for a pass soon without blocking.
func (c *Controller) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Controller) pokeTainter() {
	select {
	case c.tainterKick <- struct{}{}:
	default:
	}
}

// Run waits for the caches and runs the monitor, the tainter and the workers until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.nodeQueue.ShutDown()
	defer c.podQueue.ShutDown()
	if err := c.handlers.Err(); err != nil {
		return fmt.Errorf("registering event handlers: %w", err)
	}
	logger := klog.FromContext(ctx)
	logger.Info("Starting node lifecycle controller", "monitorPeriod", c.opts.MonitorPeriod,
		"gracePeriod", c.opts.MonitorGracePeriod, "startupGracePeriod", c.opts.StartupGracePeriod,
		"taintEviction", c.opts.TaintEviction)
	defer logger.Info("Shutting down node lifecycle controller")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.handlers.Synced()...) {
		return nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.nodeQueue.Run(ctx, nodeWorkers, c.syncNoSchedule) })
	wg.Go(func() { c.podQueue.Run(ctx, podWorkers, c.syncPod) })
	wg.Go(func() { c.runTainter(ctx) })
	wg.Go(func() { c.runMonitor(ctx) })
	if c.evictor != nil {
		wg.Go(func() { c.evictor.run(ctx) })
	}
	wg.Wait()
	return nil
}
