// The project's own pool API: lb.kcm-split.io/v1alpha1 IPAddressPool, cluster-scoped, and
// the lb.kcm-split.io Service annotations.

package poolsource

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

// Annotations a Service may carry to steer allocation from the project's own pools.
const (
	// AnnotationAddressPool names the IPAddressPool to allocate from (autoAssign ignored).
	AnnotationAddressPool = "lb.kcm-split.io/address-pool"
	// AnnotationLoadBalancerIPs requests specific addresses, comma-separated, at most one per
	// family. spec.loadBalancerIP (deprecated upstream) is honoured when this is absent.
	AnnotationLoadBalancerIPs = "lb.kcm-split.io/load-balancer-ips"
	// AnnotationAllowSharedIP is the sharing key: Services with the same key, no port in
	// common and compatible externalTrafficPolicy may get the same address.
	AnnotationAllowSharedIP = "lb.kcm-split.io/allow-shared-ip"
)

// KCMSplit is lb.kcm-split.io/v1alpha1 IPAddressPool, the project's own; its pools are keyed
// by their names (which cannot contain a slash, unlike the other APIs' keys).
var KCMSplit = API{
	Name:               "kcm-split",
	Resource:           v1alpha1.GroupVersionResource,
	PoolAnnotations:    []string{AnnotationAddressPool},
	IPsAnnotations:     []string{AnnotationLoadBalancerIPs},
	SharingAnnotations: []string{AnnotationAllowSharedIP},
	Title:              "The IPAddressPool API",
	Install:            "install the CRD from charts/kcm-split/crds/",
}

// kcmSplit reads the project's own pools from a cache of unstructured objects.
type kcmSplit struct {
	client *v1alpha1.Client
}

// NewKCMSplit is the project's own pool API; client writes the pools' status.
func NewKCMSplit(client *v1alpha1.Client) Source { return kcmSplit{client: client} }

func (kcmSplit) API() API                       { return KCMSplit }
func (kcmSplit) Namespace() string              { return "" }
func (kcmSplit) Transform(obj any) (any, error) { return obj, nil }

func (kcmSplit) Parse(obj any) (Parsed, error) {
	o, err := asKCMSplitPool(obj)
	if err != nil {
		return Parsed{}, err
	}
	return Parsed{Created: o.CreationTimestamp, Pool: ParseKCMSplit(o)}, nil
}

func asKCMSplitPool(obj any) (*v1alpha1.IPAddressPool, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected %T in the IPAddressPool cache", obj)
	}
	return v1alpha1.FromUnstructured(u)
}

// ParseKCMSplit parses one pool of the project's own API on its own (see CheckOverlaps for
// the check across pools).
func ParseKCMSplit(o *v1alpha1.IPAddressPool) *Pool {
	p := newPool(KCMSplit, o.Name, o.Spec.AvoidBuggyIPs)
	p.AutoAssign = o.Spec.AutoAssignEnabled()
	p.Priority = o.Spec.Priority
	if !p.parseAddresses(o.Spec.Addresses, v1alpha1.ReasonInvalidAddresses) {
		return p
	}
	var namespaces map[string]bool // nil: any
	if len(o.Spec.Namespaces) > 0 {
		namespaces = map[string]bool{}
		for _, ns := range o.Spec.Namespaces {
			namespaces[ns] = true
		}
	}
	var nsSelector, svcSelector labels.Selector // nil: any
	var err error
	if o.Spec.NamespaceSelector != nil {
		if nsSelector, err = metav1.LabelSelectorAsSelector(o.Spec.NamespaceSelector); err != nil {
			return p.invalid(v1alpha1.ReasonInvalidSelector, "spec.namespaceSelector: %v", err)
		}
	}
	if o.Spec.ServiceSelector != nil {
		if svcSelector, err = metav1.LabelSelectorAsSelector(o.Spec.ServiceSelector); err != nil {
			return p.invalid(v1alpha1.ReasonInvalidSelector, "spec.serviceSelector: %v", err)
		}
	}
	p.admit = func(svc *v1.Service, nsLabels labels.Set) bool {
		return (namespaces == nil || namespaces[svc.Namespace]) &&
			(nsSelector == nil || nsSelector.Matches(nsLabels)) &&
			(svcSelector == nil || svcSelector.Matches(labels.Set(svc.Labels)))
	}
	return p
}

// WriteStatus writes the pool's counts and Valid condition; an invalid pool counts nothing.
func (s kcmSplit) WriteStatus(ctx context.Context, obj any, p *Pool, stats addrpool.Stats) error {
	cur, err := asKCMSplitPool(obj)
	if err != nil {
		return err
	}
	if !p.Valid {
		stats = addrpool.Stats{}
	}
	desired := cur.DeepCopy()
	desired.Status.ObservedGeneration = cur.Generation
	desired.Status.AssignedIPv4, desired.Status.AvailableIPv4 = stats.AssignedIPv4, stats.AvailableIPv4
	desired.Status.AssignedIPv6, desired.Status.AvailableIPv6 = stats.AssignedIPv6, stats.AvailableIPv6
	status := metav1.ConditionTrue
	if !p.Valid {
		status = metav1.ConditionFalse
	}
	setCondition(&desired.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionValid, Status: status, Reason: p.Reason, Message: p.Message, ObservedGeneration: cur.Generation,
	})
	if statusEqual(cur.Status, desired.Status) {
		return nil
	}
	if _, err := s.client.UpdateStatus(ctx, desired); err != nil {
		return fmt.Errorf("updating pool status: %w", err)
	}
	return nil
}

// setCondition sets cond in conds, keeping lastTransitionTime when the status is unchanged.
func setCondition(conds *[]metav1.Condition, cond metav1.Condition) {
	for i := range *conds {
		old := &(*conds)[i]
		if old.Type != cond.Type {
			continue
		}
		if old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
		} else {
			cond.LastTransitionTime = metav1.Now()
		}
		*old = cond
		return
	}
	cond.LastTransitionTime = metav1.Now()
	*conds = append(*conds, cond)
}

func statusEqual(a, b v1alpha1.IPAddressPoolStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.AssignedIPv4 != b.AssignedIPv4 || a.AvailableIPv4 != b.AvailableIPv4 ||
		a.AssignedIPv6 != b.AssignedIPv6 || a.AvailableIPv6 != b.AvailableIPv6 || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message ||
			x.ObservedGeneration != y.ObservedGeneration || !x.LastTransitionTime.Equal(&y.LastTransitionTime) {
			return false
		}
	}
	return true
}
