// The LoadBalancerPending condition: why a Service waits for an address, on the Service.

package servicelb

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/servicelb/allocation"
)

// ConditionLoadBalancerPending is the Service condition this controller sets, with
// --service-pending-condition, on a LoadBalancer Service it serves that has no address:
// status True, reason one of allocation's Wait* constants, message the cause. It is removed
// once the Service has an address. Neither upstream's service controller nor MetalLB writes
// a Service condition (they leave Events, which expire after an hour), hence the flag.
const ConditionLoadBalancerPending = "LoadBalancerPending"

// maxConditionMessage bounds the message of the pending condition.
const maxConditionMessage = 4096

// desiredConditions returns svc's conditions with ours as plan says: set while it has no
// address, gone once it has one. changed is false when nothing would change, so an unchanged
// cause costs no write.
func desiredConditions(svc *v1.Service, plan allocation.Assignment, now metav1.Time) (conds []metav1.Condition, changed bool) {
	conds = slices.Clone(svc.Status.Conditions)
	i := slices.IndexFunc(conds, func(c metav1.Condition) bool { return c.Type == ConditionLoadBalancerPending })
	if len(plan.Ingress) > 0 || plan.PendingWhy == nil {
		if i < 0 {
			return conds, false
		}
		return slices.Delete(conds, i, i+1), true
	}
	want := metav1.Condition{
		Type:               ConditionLoadBalancerPending,
		Status:             metav1.ConditionTrue,
		Reason:             plan.WaitReason,
		Message:            clipWithEllipsis(plan.PendingWhy.Error(), maxConditionMessage),
		ObservedGeneration: svc.Generation,
		LastTransitionTime: now,
	}
	if i < 0 {
		return append(conds, want), true
	}
	old := conds[i]
	if old.Status == want.Status {
		want.LastTransitionTime = old.LastTransitionTime
	}
	if old.Status == want.Status && old.Reason == want.Reason && old.Message == want.Message && old.ObservedGeneration == want.ObservedGeneration {
		return conds, false
	}
	conds[i] = want
	return conds, true
}

// clipWithEllipsis returns s cut to at most n bytes, "..." included, so the result fits a
// field limited to n (quota's truncate keeps n bytes and adds the dots after them).
func clipWithEllipsis(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// syncCondition writes the pending condition when --service-pending-condition is on and it
// changed; it returns the Service as written (or svc).
func (c *Controller) syncCondition(ctx context.Context, svc *v1.Service, plan allocation.Assignment) (*v1.Service, error) {
	if !c.opts.PendingCondition {
		return svc, nil
	}
	conds, changed := desiredConditions(svc, plan, metav1.NewTime(c.now()))
	if !changed {
		return svc, nil
	}
	out, err := c.patchConditions(ctx, svc, conds)
	if err != nil {
		if apierrors.IsConflict(err) {
			c.metrics.conflicts.WithLabelValues(conflictStale).Inc()
		}
		return svc, err
	}
	return out, nil
}
