// Marking a silent Node Unknown: the one Node status write of this controller.

package nodelifecycle

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons and messages of the conditions a silent Node gets, upstream's.
const (
	reasonStatusUnknown      = "NodeStatusUnknown"
	messageStatusUnknown     = "Kubelet stopped posting node status."
	reasonStatusNeverUpdated = "NodeStatusNeverUpdated"
	messageNeverUpdated      = "Kubelet never posted node status."
)

// unknownConditionTypes turn Unknown when a Node falls silent. NetworkUnavailable is left
// alone: the network plugin or cloud provider owns it, not the kubelet.
var unknownConditionTypes = []v1.NodeConditionType{v1.NodeReady, v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}

// updateHealth marks node Unknown if its grace period has ended. It returns the Ready
// status the Node had, its Ready condition now, the deadline if it is still within grace,
// and the Node as written (nil if not written).
func (c *Controller) updateHealth(ctx context.Context, node *v1.Node) (observed v1.ConditionStatus, current *v1.NodeCondition, deadline time.Time, written *v1.Node, err error) {
	c.health.observeNode(node)
	if lease, err := c.leases.Leases(v1.NamespaceNodeLease).Get(node.Name); err == nil {
		c.health.observeLease(lease)
	}
	written, err = c.editNode(ctx, node, "status", func(n *v1.Node) map[string]any {
		// After a conflict n is fresh from the API: it may carry a new heartbeat.
		c.health.observeNode(n)
		h, _ := c.health.get(n.Name)
		now := c.now()
		current = nodeReadyCondition(&n.Status)
		observed = ""
		if current != nil {
			observed = current.Status
		}
		deadline = c.opts.deadline(h)
		if !now.After(deadline) {
			return nil
		}
		deadline = time.Time{}
		conds, changed := unknownConditions(n, now)
		if !changed {
			return nil
		}
		return map[string]any{"status": map[string]any{"conditions": conds}}
	})
	if err != nil {
		return "", nil, time.Time{}, nil, err
	}
	if written != nil {
		current = nodeReadyCondition(&written.Status)
	}
	if current != nil && current.Status == v1.ConditionUnknown {
		deadline = time.Time{}
	}
	return observed, current, deadline, written, nil
}

// unknownConditions returns node's conditions with those a kubelet owns set to Unknown, and
// whether the Ready condition changed (the only change worth a write, as upstream).
func unknownConditions(node *v1.Node, now time.Time) ([]v1.NodeCondition, bool) {
	conds := make([]v1.NodeCondition, len(node.Status.Conditions))
	copy(conds, node.Status.Conditions)
	readyChanged := false
	at := metav1.NewTime(now)
	for _, t := range unknownConditionTypes {
		i := -1
		for j := range conds {
			if conds[j].Type == t {
				i = j
				break
			}
		}
		switch {
		case i < 0:
			conds = append(conds, v1.NodeCondition{
				Type: t, Status: v1.ConditionUnknown,
				Reason: reasonStatusNeverUpdated, Message: messageNeverUpdated,
				LastHeartbeatTime: node.CreationTimestamp, LastTransitionTime: at,
			})
		case conds[i].Status != v1.ConditionUnknown:
			conds[i].Status = v1.ConditionUnknown
			conds[i].Reason = reasonStatusUnknown
			conds[i].Message = messageStatusUnknown
			conds[i].LastTransitionTime = at
		default:
			continue
		}
		if t == v1.NodeReady {
			readyChanged = true
		}
	}
	return conds, readyChanged
}
