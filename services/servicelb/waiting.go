// Why a Service waits for an address: one reason per waiting Service, for the pending gauge's
// reason label (and the Service's condition).

package servicelb

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionLoadBalancerPending is the Service condition this controller sets, with
// --service-pending-condition, on a LoadBalancer Service it serves that has no address:
// status True, reason one of the Wait* constants, message the cause. It is removed once the
// Service has an address. Neither upstream's service controller nor MetalLB writes a Service
// condition (they leave Events, which expire after an hour), hence the flag.
const ConditionLoadBalancerPending = "LoadBalancerPending"

// Reasons a LoadBalancer Service waits for an address.
const (
	// WaitPoolAPIUnavailable: an enabled pool API is not served or its cache not synced;
	// nothing is handed out until it is (and nothing is taken away).
	WaitPoolAPIUnavailable = "PoolAPIUnavailable"
	// WaitInvalidRequest: the Service's annotations or spec.loadBalancerIP cannot be met as
	// written.
	WaitInvalidRequest = "InvalidRequest"
	// WaitNoMatchingPool: no pool may serve the Service (the pool it names does not exist,
	// is invalid or does not admit it; no pool admits it automatically).
	WaitNoMatchingPool = "NoMatchingPool"
	// WaitRequestedIPNotInPool: the address it asks for is in no pool it may use.
	WaitRequestedIPNotInPool = "RequestedIPNotInPool"
	// WaitSharingConflict: the address it asks for is held by a Service it may not share
	// with (sharing key, ports, traffic policy).
	WaitSharingConflict = "SharingConflict"
	// WaitPoolExhausted: the pools it may use have no free address it may take.
	WaitPoolExhausted = "PoolExhausted"
)

// pendingLabels are the labels of kcm_split_servicelb_pending_services for one Service.
type pendingLabels struct {
	api, pool, reason string
}

// firstReason keeps the first reason given: the one closest to the cause.
func firstReason(cur *string, reason string) {
	if *cur == "" {
		*cur = reason
	}
}

// desiredConditions returns svc's conditions with ours as plan says: set while it has no
// address, gone once it has one. changed is false when nothing would change, so an unchanged
// cause costs no write.
func desiredConditions(svc *v1.Service, plan assignment, now metav1.Time) (conds []metav1.Condition, changed bool) {
	conds = slices.Clone(svc.Status.Conditions)
	i := slices.IndexFunc(conds, func(c metav1.Condition) bool { return c.Type == ConditionLoadBalancerPending })
	if len(plan.ingress) > 0 || plan.pendingWhy == nil {
		if i < 0 {
			return conds, false
		}
		return slices.Delete(conds, i, i+1), true
	}
	want := metav1.Condition{
		Type:               ConditionLoadBalancerPending,
		Status:             metav1.ConditionTrue,
		Reason:             plan.waitReason,
		Message:            truncate(plan.pendingWhy.Error(), 4096),
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// syncCondition writes the pending condition when --service-pending-condition is on and it
// changed; it returns the Service as written (or svc).
func (c *Controller) syncCondition(ctx context.Context, svc *v1.Service, plan assignment) (*v1.Service, error) {
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
