package nodelifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// The DisruptionTarget condition an evicted Pod gets before its deletion, upstream's.
const (
	reasonDeletionByTaintManager  = "DeletionByTaintManager"
	messageDeletionByTaintManager = "Taint manager: deleting due to NoExecute taint"
)

// evictor is upstream's taint-eviction controller: it deletes the Pods that do not tolerate
// the NoExecute taints of their Node, at once or when the smallest matching
// tolerationSeconds has passed. A deadline is only a wake-up: when it comes, the decision is
// taken again from the current Pod and Node, so a taint removed or a toleration added in
// between cancels the eviction even if an event was missed.
type evictor struct {
	client     kubernetes.Interface
	recorder   record.EventRecorder
	metrics    *controllerMetrics
	now        func() time.Time
	nodes      corelisters.NodeLister
	pods       corelisters.PodLister
	podsByNode cache.Indexer

	nodeQueue  *worker.Queue[string]
	podQueue   *worker.Queue[string]
	evictQueue *worker.Queue[string]

	mu        sync.Mutex
	scheduled map[string]*scheduledEviction
}

// scheduledEviction is a Pod that will be deleted at due unless something changes.
type scheduledEviction struct {
	uid types.UID
	// start is when this process first saw the Pod not tolerating its Node's taints for
	// ever; tolerationSeconds count from there, as upstream's.
	start, due time.Time
	// announced: the eviction Event was recorded (once per eviction, retries included).
	announced bool
}

// newEvictor registers its event handlers in hs, the controller's set, so that the
// controller waits for them and reports their failure.
func newEvictor(client kubernetes.Interface, recorder record.EventRecorder, nodes coreinformers.NodeInformer, pods coreinformers.PodInformer,
	podsByNode cache.Indexer, hs *informer.Handlers, m *controllerMetrics, reg prometheus.Registerer, now func() time.Time) *evictor {
	e := &evictor{
		client: client, recorder: recorder, metrics: m, now: now,
		nodes: nodes.Lister(), pods: pods.Lister(), podsByNode: podsByNode,
		nodeQueue:  worker.New(worker.Options[string]{Name: EvictionNodeQueueName, Controller: ControllerID, Registerer: reg}),
		podQueue:   worker.New(worker.Options[string]{Name: EvictionPodQueueName, Controller: ControllerID, Registerer: reg}),
		evictQueue: worker.New(worker.Options[string]{Name: EvictionQueueName, Controller: ControllerID, Registerer: reg}),
		scheduled:  map[string]*scheduledEviction{},
	}
	hs.Add(nodes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok && len(noExecuteTaints(n)) > 0 {
				e.nodeQueue.Add(n.Name)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := cur.(*v1.Node)
			if ok1 && ok2 && !equality.Semantic.DeepEqual(noExecuteTaints(o), noExecuteTaints(n)) {
				e.nodeQueue.Add(n.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*v1.Node); ok {
				e.nodeQueue.Add(n.Name)
			}
		},
	})
	hs.Add(pods.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*v1.Pod); ok && p.Spec.NodeName != "" {
				e.podQueue.Add(podKey(p))
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Pod)
			p, ok2 := cur.(*v1.Pod)
			if ok1 && ok2 && (o.Spec.NodeName != p.Spec.NodeName ||
				(o.DeletionTimestamp == nil) != (p.DeletionTimestamp == nil) ||
				!equality.Semantic.DeepEqual(o.Spec.Tolerations, p.Spec.Tolerations)) {
				e.podQueue.Add(podKey(p))
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*v1.Pod); ok {
				e.podQueue.Add(podKey(p))
			}
		},
	})
	return e
}

func (e *evictor) run(ctx context.Context) {
	klog.FromContext(ctx).Info("Starting taint eviction")
	var wg sync.WaitGroup
	wg.Go(func() { e.nodeQueue.Run(ctx, evictionWorkers, e.syncNode) })
	wg.Go(func() { e.podQueue.Run(ctx, evictionWorkers, e.syncPod) })
	wg.Go(func() { e.evictQueue.Run(ctx, evictionWorkers, e.evict) })
	wg.Wait()
}

// syncNode re-decides every Pod on a Node whose NoExecute taints changed.
func (e *evictor) syncNode(ctx context.Context, name string) error {
	taints, err := e.nodeTaints(name)
	if err != nil {
		return err
	}
	objs, err := e.podsByNode.ByIndex(nodeNameIndex, name)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if pod, ok := o.(*v1.Pod); ok && pod.Spec.NodeName == name {
			e.decide(ctx, pod, taints)
		}
	}
	return nil
}

// syncPod re-decides one Pod whose Node, tolerations or deletion changed.
func (e *evictor) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := e.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		e.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName == "" {
		e.forget(key)
		return nil
	}
	taints, err := e.nodeTaints(pod.Spec.NodeName)
	if err != nil {
		return err
	}
	e.decide(ctx, pod, taints)
	return nil
}

// nodeTaints returns the NoExecute taints of the named Node; none if it does not exist.
func (e *evictor) nodeTaints(name string) ([]v1.Taint, error) {
	node, err := e.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return noExecuteTaints(node), nil
}

// decide schedules, moves or cancels the eviction of pod given its Node's NoExecute taints.
func (e *evictor) decide(ctx context.Context, pod *v1.Pod, taints []v1.Taint) {
	key := podKey(pod)
	if pod.DeletionTimestamp != nil {
		// Being deleted already (by us, perhaps as a previous leader, or by its owner):
		// deleting again would only duplicate Events.
		e.forget(key)
		return
	}
	tolerated, forever, after := tolerationDeadline(taints, pod.Spec.Tolerations)
	if forever {
		e.cancel(ctx, pod)
		return
	}
	now := e.now()
	e.mu.Lock()
	s := e.scheduled[key]
	if s == nil || s.uid != pod.UID {
		s = &scheduledEviction{uid: pod.UID, start: now}
		e.scheduled[key] = s
	}
	if tolerated {
		// Counted from when the Pod was first seen affected, so that an unrelated
		// update of the Node or the Pod does not push the deadline back.
		s.due = s.start.Add(after)
	} else {
		s.due = now
	}
	due := s.due
	e.mu.Unlock()
	klog.FromContext(ctx).V(4).Info("Eviction scheduled", "pod", key, "in", due.Sub(now))
	e.evictQueue.AddAfter(key, due.Sub(now))
}

// cancel drops a scheduled eviction, with upstream's Event, because the Pod now tolerates
// its Node's taints for ever or they are gone.
func (e *evictor) cancel(ctx context.Context, pod *v1.Pod) {
	key := podKey(pod)
	e.mu.Lock()
	s := e.scheduled[key]
	delete(e.scheduled, key)
	e.mu.Unlock()
	if s == nil {
		return
	}
	klog.FromContext(ctx).V(2).Info("Cancelled eviction", "pod", key)
	e.recorder.Eventf(podRef(pod), v1.EventTypeNormal, ReasonEviction, "Cancelling deletion of Pod %s", key)
}

func (e *evictor) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.scheduled, key)
}

func podRef(pod *v1.Pod) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

// evict deletes the Pod named by key if its eviction is due, checking once more that it
// still stands.
func (e *evictor) evict(ctx context.Context, key string) error {
	now := e.now()
	e.mu.Lock()
	s, ok := e.scheduled[key]
	var due time.Time
	var announced bool
	if ok {
		due, announced = s.due, s.announced
	}
	e.mu.Unlock()
	if !ok {
		return nil // cancelled
	}
	if now.Before(due) {
		return worker.RequeueAfter(due.Sub(now))
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := e.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && (pod.UID != s.uid || pod.DeletionTimestamp != nil)) {
		e.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("pod", key, "node", pod.Spec.NodeName)
	if !announced {
		logger.Info("Deleting pod: it does not tolerate its node's NoExecute taints")
		e.recorder.Eventf(podRef(pod), v1.EventTypeNormal, ReasonEviction, "Marking for deletion Pod %s", key)
		e.mu.Lock()
		s.announced = true
		e.mu.Unlock()
	}
	if err := e.deletePod(ctx, pod); err != nil {
		return err
	}
	e.metrics.podDeletions.Inc()
	e.metrics.podDeletionDur.Observe(e.now().Sub(due).Seconds())
	e.forget(key)
	return nil
}

// deletePod marks pod with the DisruptionTarget condition, so its owner can tell why it
// went, then deletes it; both pinned to its UID.
func (e *evictor) deletePod(ctx context.Context, pod *v1.Pod) error {
	pods := e.client.CoreV1().Pods(pod.Namespace)
	marked := false
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue {
			marked = true
		}
	}
	if !marked {
		patch, err := podStatusPatch(pod.UID, v1.PodCondition{
			Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
			Reason: reasonDeletionByTaintManager, Message: messageDeletionByTaintManager,
			LastTransitionTime: metav1.NewTime(e.now()),
		})
		if err != nil {
			return err
		}
		_, err = pods.Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
