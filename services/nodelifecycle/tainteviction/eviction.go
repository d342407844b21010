package tainteviction

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/nodelifecycle/internal/nodepods"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// The DisruptionTarget condition an evicted Pod gets before its deletion, upstream's.
const (
	reasonDeletionByTaintManager  = "DeletionByTaintManager"
	messageDeletionByTaintManager = "Taint manager: deleting due to NoExecute taint"
)

// scheduledEviction is a Pod that will be deleted at due unless something changes.
type scheduledEviction struct {
	uid types.UID
	// start is when this process first saw the Pod not tolerating its Node's taints for
	// ever; tolerationSeconds count from there, as upstream's.
	start, due time.Time
	// announced: the eviction Event was recorded (once per eviction, retries included).
	announced bool
}

// syncNode re-decides every Pod on a Node whose NoExecute taints changed.
func (c *Controller) syncNode(ctx context.Context, name string) error {
	taints, err := c.nodeTaints(name)
	if err != nil {
		return err
	}
	pods, err := nodepods.OnNode(c.podsByNode, name)
	if err != nil {
		return err
	}
	for _, pod := range pods {
		c.decide(ctx, pod, taints)
	}
	return nil
}

// syncPod re-decides one Pod whose Node, tolerations or deletion changed.
func (c *Controller) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName == "" {
		c.forget(key)
		return nil
	}
	taints, err := c.nodeTaints(pod.Spec.NodeName)
	if err != nil {
		return err
	}
	c.decide(ctx, pod, taints)
	return nil
}

// nodeTaints returns the NoExecute taints of the named Node; none if it does not exist.
func (c *Controller) nodeTaints(name string) ([]v1.Taint, error) {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return noExecuteTaints(node), nil
}

// decide schedules, moves or cancels the eviction of pod given its Node's NoExecute taints.
func (c *Controller) decide(ctx context.Context, pod *v1.Pod, taints []v1.Taint) {
	key := nodepods.Key(pod)
	if pod.DeletionTimestamp != nil {
		// Being deleted already (by us, perhaps as a previous leader, or by its owner):
		// deleting again would only duplicate Events.
		c.forget(key)
		return
	}
	tolerated, forever, after := tolerationDeadline(taints, pod.Spec.Tolerations)
	if forever {
		c.cancel(ctx, pod)
		return
	}
	now := c.now()
	c.mu.Lock()
	s := c.scheduled[key]
	if s == nil || s.uid != pod.UID {
		s = &scheduledEviction{uid: pod.UID, start: now}
		c.scheduled[key] = s
	}
	if tolerated {
		// Counted from when the Pod was first seen affected, so that an unrelated
		// update of the Node or the Pod does not push the deadline back.
		s.due = s.start.Add(after)
	} else {
		s.due = now
	}
	due := s.due
	c.mu.Unlock()
	klog.FromContext(ctx).V(4).Info("Eviction scheduled", "pod", key, "in", due.Sub(now))
	c.evictQueue.AddAfter(key, due.Sub(now))
}

// cancel drops a scheduled eviction, with upstream's Event, because the Pod now tolerates
// its Node's taints for ever or they are gone.
func (c *Controller) cancel(ctx context.Context, pod *v1.Pod) {
	key := nodepods.Key(pod)
	c.mu.Lock()
	s := c.scheduled[key]
	delete(c.scheduled, key)
	c.mu.Unlock()
	if s == nil {
		return
	}
	klog.FromContext(ctx).V(2).Info("Cancelled eviction", "pod", key)
	c.recorder.Eventf(podRef(pod), v1.EventTypeNormal, ReasonEviction, "Cancelling deletion of Pod %s", key)
}

func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.scheduled, key)
}

func podRef(pod *v1.Pod) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

// evict deletes the Pod named by key if its eviction is due, checking once more that it
// still stands.
func (c *Controller) evict(ctx context.Context, key string) error {
	now := c.now()
	c.mu.Lock()
	s, ok := c.scheduled[key]
	var due time.Time
	var announced bool
	if ok {
		due, announced = s.due, s.announced
	}
	c.mu.Unlock()
	if !ok {
		return nil // cancelled
	}
	if now.Before(due) {
		return worker.RequeueAfter(due.Sub(now))
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && (pod.UID != s.uid || pod.DeletionTimestamp != nil)) {
		c.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("pod", key, "node", pod.Spec.NodeName)
	if !announced {
		logger.Info("Deleting pod: it does not tolerate its node's NoExecute taints")
		c.recorder.Eventf(podRef(pod), v1.EventTypeNormal, ReasonEviction, "Marking for deletion Pod %s", key)
		c.mu.Lock()
		s.announced = true
		c.mu.Unlock()
	}
	if err := c.deletePod(ctx, pod); err != nil {
		return err
	}
	c.metrics.podDeletions.Inc()
	c.metrics.podDeletionDur.Observe(c.now().Sub(due).Seconds())
	c.forget(key)
	return nil
}

// deletePod marks pod with the DisruptionTarget condition, so its owner can tell why it
// went, then deletes it; both pinned to its UID.
func (c *Controller) deletePod(ctx context.Context, pod *v1.Pod) error {
	pods := c.client.CoreV1().Pods(pod.Namespace)
	marked := false
	for _, cond := range pod.Status.Conditions {
		if cond.Type == v1.DisruptionTarget && cond.Status == v1.ConditionTrue {
			marked = true
		}
	}
	if !marked {
		patch, err := nodepods.StatusPatch(pod.UID, v1.PodCondition{
			Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
			Reason: reasonDeletionByTaintManager, Message: messageDeletionByTaintManager,
			LastTransitionTime: metav1.NewTime(c.now()),
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
