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
