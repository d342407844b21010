package nodelifecycle

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// conflictRetries bounds the read-modify-write loops below: a Node written by its kubelet
// and by other controllers can conflict a few times in a row, not forever.
const conflictRetries = 5

// editNode applies edit to node (the cached copy first, then a fresh one after each
// conflict) and writes the result as a merge patch carrying the resourceVersion it was
// computed from, so nothing written meanwhile is overwritten. edit returns the patch body
// (without metadata) or nil when node needs no change. It returns the node as written, or
// nil when no write was needed.
func (c *Controller) editNode(ctx context.Context, node *v1.Node, subresource string, edit func(*v1.Node) map[string]any) (*v1.Node, error) {
	nodes := c.client.CoreV1().Nodes()
	name := node.Name
	for attempt := 0; ; attempt++ {
		body := edit(node)
		if body == nil {
			return nil, nil
		}
		meta, _ := body["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			body["metadata"] = meta
		}
		meta["resourceVersion"] = node.ResourceVersion
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		var subresources []string
		if subresource != "" {
			subresources = []string{subresource}
		}
		written, err := nodes.Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{}, subresources...)
		if err == nil {
			return written, nil
		}
		if !apierrors.IsConflict(err) || attempt+1 >= conflictRetries {
			return nil, fmt.Errorf("writing node %s: %w", name, err)
		}
		if node, err = nodes.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("reading node %s after a conflict: %w", name, err)
		}
	}
}

// setNodeLabelsAndTaints brings node's condition NoSchedule taints and beta os/arch labels
// in line in one write: a Node fresh from registration usually needs both (the apiserver's
// admission gives it a not-ready NoSchedule taint, and nothing gives it the beta labels), and
// one patch instead of two halves what a controller starting over a whole cluster spends of
// its client budget. It reports what changed.
func (c *Controller) setNodeLabelsAndTaints(ctx context.Context, node *v1.Node) (written *v1.Node, taints, labels bool, err error) {
	written, err = c.editNode(ctx, node, "", func(n *v1.Node) map[string]any {
		body := map[string]any{}
		newTaints, changed := withNoScheduleTaints(n)
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

// setTaints writes node's spec.taints as edit computes them from the current ones.
func (c *Controller) setTaints(ctx context.Context, node *v1.Node, edit func(*v1.Node) ([]v1.Taint, bool)) (*v1.Node, error) {
	return c.editNode(ctx, node, "", func(n *v1.Node) map[string]any {
		taints, changed := edit(n)
		if !changed {
			return nil
		}
		return map[string]any{"spec": map[string]any{"taints": taintsValue(taints)}}
	})
}

// taintsValue is taints as a merge patch sets them: null deletes the field when none is left.
func taintsValue(taints []v1.Taint) any {
	if len(taints) == 0 {
		return nil
	}
	return taints
}

// podStatusPatch is a strategic merge patch of a Pod's status conditions (merged by type),
// pinned to the Pod's UID so that a Pod recreated under the same name is never touched.
func podStatusPatch(uid types.UID, conds ...v1.PodCondition) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status":   map[string]any{"conditions": conds},
	})
}
