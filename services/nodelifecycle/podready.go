// Pods marked not Ready on a Node nobody hears from: by the monitor for every Pod of such a
// Node, and by the Pod queue for a Pod bound to one later.

package nodelifecycle

import (
	"context"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/nodelifecycle/internal/nodepods"
)

// syncPod marks a Pod just bound to a Node that is not Ready as not Ready itself: the
// monitor only looks at Pods when their Node changes state.
func (c *Controller) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName == "" {
		return nil
	}
	node, err := c.nodes.Get(pod.Spec.NodeName)
	if apierrors.IsNotFound(err) {
		return nil // no such Node (yet): when it appears, the monitor handles its Pods
	}
	if err != nil {
		return err
	}
	if s := readyStatus(node); s == "" || s == v1.ConditionTrue {
		return nil
	}
	if readyStatus(node) == v1.ConditionUnknown && c.partition.holds(node.Name) {
		return nil // its Pods are marked, if at all, when the hold ends
	}
	return c.markPodNotReady(ctx, pod)
}

// markPodsNotReady sets the Ready condition of every Pod on the named Node to False, so that
// Endpoints stop sending traffic to a Node nobody hears from.
func (c *Controller) markPodsNotReady(ctx context.Context, nodeName string) error {
	pods, err := nodepods.OnNode(c.podsByNode, nodeName)
	if err != nil {
		return err
	}
	var errs []error
	for _, pod := range pods {
		if err := c.markPodNotReady(ctx, pod); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// markPodNotReady flips one Pod's Ready condition to False; Pods without a Ready condition
// or not Ready already are left alone, as upstream.
func (c *Controller) markPodNotReady(ctx context.Context, pod *v1.Pod) error {
	var ready *v1.PodCondition
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == v1.PodReady {
			ready = &pod.Status.Conditions[i]
		}
	}
	if ready == nil || ready.Status == v1.ConditionFalse {
		return nil
	}
	patch, err := nodepods.StatusPatch(pod.UID, v1.PodCondition{
		Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(c.now()),
		Reason: ready.Reason, Message: ready.Message,
	})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // gone, or replaced by a Pod of the same name (UID mismatch)
	case err != nil:
		return err
	}
	klog.FromContext(ctx).V(2).Info("Marked pod not ready", "pod", klog.KObj(pod), "node", pod.Spec.NodeName)
	c.recorder.Event(pod, v1.EventTypeWarning, ReasonNodeNotReady, "Node is not ready")
	return nil
}
