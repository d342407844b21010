// Package v1alpha1 is the lb.kcm-split.io/v1alpha1 API: IPAddressPool, the addresses
// service-lb-controller assigns to LoadBalancer Services. The CRD manifest is
// charts/kcm-split/crds/lb.kcm-split.io_ipaddresspools.yaml; these types mirror its schema and
// are read and written through the dynamic client (see client.go), so no generated code is
// needed.
package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Names of the API.
const (
	Group    = "lb.kcm-split.io"
	Version  = "v1alpha1"
	Kind     = "IPAddressPool"
	Resource = "ipaddresspools"
)

// GroupVersionResource of IPAddressPool, for the dynamic client and informers.
var GroupVersionResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// GroupVersionKind of IPAddressPool.
var GroupVersionKind = schema.GroupVersionKind{Group: Group, Version: Version, Kind: Kind}

// IPAddressPool is a cluster-scoped pool of load-balancer addresses.
type IPAddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IPAddressPoolSpec   `json:"spec"`
	Status IPAddressPoolStatus `json:"status,omitempty"`
}

// IPAddressPoolSpec is what the pool holds and who may use it.
type IPAddressPoolSpec struct {
	// Addresses are CIDRs, inclusive "first-last" ranges or single addresses, IPv4 or IPv6.
	Addresses []string `json:"addresses"`
	// AutoAssign lets Services get addresses without naming the pool; nil means true.
	AutoAssign *bool `json:"autoAssign,omitempty"`
	// AvoidBuggyIPs skips IPv4 addresses ending in .0 or .255.
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`
	// Priority orders pools a Service may use: lower first, ties by name.
	Priority int32 `json:"priority,omitempty"`
	// Namespaces, if set, are the only namespaces whose Services may use the pool.
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceSelector, if set, must match the labels of the Service's namespace.
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// ServiceSelector, if set, must match the Service's labels.
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`
}

// IPAddressPoolStatus reports usage and validity.
type IPAddressPoolStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	AssignedIPv4       int64              `json:"assignedIPv4"`
	AvailableIPv4      int64              `json:"availableIPv4"`
	AssignedIPv6       int64              `json:"assignedIPv6"`
	AvailableIPv6      int64              `json:"availableIPv6"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types and reasons of an IPAddressPool.
const (
	// ConditionValid is True when the pool's spec is usable; when False the pool hands out
	// nothing and Services holding its addresses are moved elsewhere.
	ConditionValid = "Valid"

	ReasonValid            = "Valid"
	ReasonInvalidAddresses = "InvalidAddresses"
	ReasonInvalidSelector  = "InvalidSelector"
	ReasonOverlapping      = "Overlapping"
)

// AutoAssignEnabled applies the default of AutoAssign.
func (s *IPAddressPoolSpec) AutoAssignEnabled() bool { return s.AutoAssign == nil || *s.AutoAssign }

// FromUnstructured converts what the dynamic client returns.
func FromUnstructured(u *unstructured.Unstructured) (*IPAddressPool, error) {
	var p IPAddressPool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return nil, fmt.Errorf("decoding IPAddressPool %s: %w", u.GetName(), err)
	}
	return &p, nil
}

// ToUnstructured converts p for the dynamic client.
func ToUnstructured(p *IPAddressPool) (*unstructured.Unstructured, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(GroupVersionKind)
	return u, nil
}

// DeepCopy returns a deep copy of p.
func (p *IPAddressPool) DeepCopy() *IPAddressPool {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Addresses = append([]string(nil), p.Spec.Addresses...)
	if p.Spec.AutoAssign != nil {
		v := *p.Spec.AutoAssign
		out.Spec.AutoAssign = &v
	}
	out.Spec.Namespaces = append([]string(nil), p.Spec.Namespaces...)
	out.Spec.NamespaceSelector = p.Spec.NamespaceSelector.DeepCopy()
	out.Spec.ServiceSelector = p.Spec.ServiceSelector.DeepCopy()
	out.Status.Conditions = nil
	for i := range p.Status.Conditions {
		var c metav1.Condition
		p.Status.Conditions[i].DeepCopyInto(&c)
		out.Status.Conditions = append(out.Status.Conditions, c)
	}
	return &out
}
