package nodelifecycle

import (
	"context"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// syncNode brings the condition NoSchedule taints of the named Node in line with its
// conditions and spec.unschedulable, and its beta os/arch labels with the stable ones.
func (c *Controller) syncNode(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	written, taints, labels, err := c.setNodeLabelsAndTaints(ctx, node)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil && written != nil {
		klog.FromContext(ctx).V(2).Info("Updated node", "node", name, "conditionTaints", taints, "betaLabels", labels)
	}
	return err
}

// setNodeLabelsAndTaints brings node's condition NoSchedule taints and beta os/arch labels
// in line in one write: a Node fresh from registration usually needs both (the apiserver's
// admission gives it a not-ready NoSchedule taint, and nothing gives it the beta labels), and
// one patch instead of two halves what a controller starting over a whole cluster spends of
// its client budget. It reports what changed.
func (c *Controller) setNodeLabelsAndTaints(ctx context.Context, node *v1.Node) (written *v1.Node, taints, labels bool, err error) {
	written, err = c.editNode(ctx, node, "", func(n *v1.Node) map[string]any {
		body := map[string]any{}
		hold := readyStatus(n) == v1.ConditionUnknown && c.partition.holds(n.Name)
		newTaints, changed := withNoScheduleTaints(n, c.now(), hold)
		taints = changed
		if changed {
			body["spec"] = map[string]any{"taints": taintsValue(newTaints)}
		}
		beta := betaLabelsToSet(n)
		labels = len(beta) > 0
		if labels {
			body["metadata"] = map[string]any{"labels": beta}
		}
		if len(body) == 0 {
			return nil
		}
		return body
	})
	return written, taints, labels, err
}
