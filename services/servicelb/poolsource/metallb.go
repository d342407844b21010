// MetalLB's API as a pool source: metallb.io/v1beta1 IPAddressPool read with MetalLB's own Go
// types (go.universe.tf/metallb/api/v1beta1), and MetalLB's Service annotations.
//
// Importing that package adds sigs.k8s.io/controller-runtime v0.20.4 to the module graph (its
// pkg/scheme and pkg/conversion only, which build with client-go v0.36): the least bad way,
// since the alternative, a copy of MetalLB's types, is what the project rules forbid and
// would drift from MetalLB's schema unnoticed.

package poolsource

import (
	"context"
	"fmt"
	"slices"

	mlb "go.universe.tf/metallb/api/v1beta1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
)

// MetalLB's Service annotations, current and legacy (metallb.universe.tf), read when
// --pool-api includes metallb. The current name wins when both are present, as in MetalLB.
const (
	AnnotationMetalLBAddressPool       = "metallb.io/address-pool"
	AnnotationMetalLBLoadBalancerIPs   = "metallb.io/loadBalancerIPs"
	AnnotationMetalLBAllowSharedIP     = "metallb.io/allow-shared-ip"
	LegacyAnnotationMetalLBAddressPool = "metallb.universe.tf/address-pool"
	LegacyAnnotationMetalLBLBIPs       = "metallb.universe.tf/loadBalancerIPs"
	LegacyAnnotationMetalLBSharedIP    = "metallb.universe.tf/allow-shared-ip"
)

// MetalLBGroupVersionResource is MetalLB's IPAddressPool resource.
var MetalLBGroupVersionResource = schema.GroupVersionResource{Group: mlb.GroupVersion.Group, Version: mlb.GroupVersion.Version, Resource: "ipaddresspools"}

// MetalLB is metallb.io/v1beta1 IPAddressPool with MetalLB's Service annotations. Its pools
// are keyed metallb.io/<name>: a kcm-split pool name cannot contain a slash.
var MetalLB = API{
	Name:               "metallb",
	Resource:           MetalLBGroupVersionResource,
	KeyPrefix:          "metallb.io/",
	OnePool:            true,
	PoolAnnotations:    []string{AnnotationMetalLBAddressPool, LegacyAnnotationMetalLBAddressPool},
	IPsAnnotations:     []string{AnnotationMetalLBLoadBalancerIPs, LegacyAnnotationMetalLBLBIPs},
	SharingAnnotations: []string{AnnotationMetalLBAllowSharedIP, LegacyAnnotationMetalLBSharedIP},
	IPsExcludeSpecIP:   true,
	Title:              "MetalLB's IPAddressPool API",
	Install:            "install MetalLB's CRDs",
}

// metalLB reads MetalLB's pools of one namespace, typed by Transform.
type metalLB struct {
	res       dynamic.ResourceInterface // nil: status is not written
	namespace string
}

// NewMetalLB is MetalLB's pool API in namespace (MetalLB's controller and speaker read only
// their own namespace's pools); dyn writes the pools' status.
func NewMetalLB(dyn dynamic.Interface, namespace string) Source {
	s := metalLB{namespace: namespace}
	if dyn != nil {
		s.res = dyn.Resource(MetalLBGroupVersionResource).Namespace(namespace)
	}
	return s
}

func (metalLB) API() API            { return MetalLB }
func (s metalLB) Namespace() string { return s.namespace }

func (metalLB) Parse(obj any) (Parsed, error) {
	o, err := asMetalLBPool(obj)
	if err != nil {
		return Parsed{}, err
	}
	return Parsed{Created: o.CreationTimestamp, Pool: ParseMetalLB(o)}, nil
}

// ParseMetalLB parses a MetalLB IPAddressPool with MetalLB's validity rules for one pool
// (addresses, selectors, duplicate namespaces).
func ParseMetalLB(o *mlb.IPAddressPool) *Pool {
	p := newPool(MetalLB, o.Name, o.Spec.AvoidBuggyIPs)
	p.AutoAssign = o.Spec.AutoAssign == nil || *o.Spec.AutoAssign
	// Without serviceAllocation a pool comes after every pool with one.
	p.Group = 2
	if !p.parseAddresses(o.Spec.Addresses, "Invalid") {
		return p
	}
	a := metalLBAdmission{}
	p.admit = a.admits
	sa := o.Spec.AllocateTo
	if sa == nil {
		return p
	}
	// With serviceAllocation: by priority, a priority of 0 after every other.
	p.Priority = int32(min(max(sa.Priority, 0), 1<<31-1))
	p.Group = 0
	if p.Priority == 0 {
		p.Group = 1
	}
	for _, ns := range sa.Namespaces {
		if a.namespaces == nil {
			a.namespaces = map[string]bool{}
		}
		if a.namespaces[ns] {
			return p.invalid("Invalid", "spec.serviceAllocation.namespaces: %s twice", ns)
		}
		a.namespaces[ns] = true
	}
	for i := range sa.NamespaceSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&sa.NamespaceSelectors[i])
		if err != nil {
			return p.invalid("Invalid", "spec.serviceAllocation.namespaceSelectors: %v", err)
		}
		a.nsAny = append(a.nsAny, sel)
	}
	for i := range sa.ServiceSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&sa.ServiceSelectors[i])
		if err != nil {
			return p.invalid("Invalid", "spec.serviceAllocation.serviceSelectors: %v", err)
		}
		a.svcAny = append(a.svcAny, sel)
	}
	p.admit = a.admits
	return p
}

// metalLBAdmission is MetalLB's serviceAllocation rule: the namespace must be listed or
// match a namespace selector (when any is given), and the Service must match a service
// selector (when any is given).
type metalLBAdmission struct {
	namespaces map[string]bool
	nsAny      []labels.Selector
	svcAny     []labels.Selector
}

func (a metalLBAdmission) admits(svc *v1.Service, nsLabels labels.Set) bool {
	if len(a.namespaces) > 0 || len(a.nsAny) > 0 {
		ok := a.namespaces[svc.Namespace]
		for _, sel := range a.nsAny {
			ok = ok || sel.Matches(nsLabels)
		}
		if !ok {
			return false
		}
	}
	if len(a.svcAny) == 0 {
		return true
	}
	return slices.ContainsFunc(a.svcAny, func(sel labels.Selector) bool { return sel.Matches(labels.Set(svc.Labels)) })
}

// asMetalLBPool reads an object of the MetalLB pool cache: typed by Transform, or
// unstructured from an informer without it.
func asMetalLBPool(o any) (*mlb.IPAddressPool, error) {
	switch t := o.(type) {
	case *mlb.IPAddressPool:
		return t, nil
	case *unstructured.Unstructured:
		var p mlb.IPAddressPool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(t.Object, &p); err != nil {
			return nil, fmt.Errorf("decoding metallb.io IPAddressPool %s: %w", t.GetName(), err)
		}
		return &p, nil
	}
	return nil, fmt.Errorf("unexpected %T in the metallb.io IPAddressPool cache", o)
}

// Transform makes the cache keep MetalLB's typed object without managedFields, which
// nothing here reads.
func (metalLB) Transform(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		p, err := asMetalLBPool(u)
		if err != nil {
			return nil, err
		}
		p.ManagedFields = nil
		return p, nil
	}
	return obj, nil
}

// WriteStatus writes the four counters MetalLB v0.15.2's controller keeps in a pool's status
// (internal/k8s/controllers/pool_status_controller.go), nothing else; an invalid pool counts
// nothing (MetalLB's would not load it).
func (s metalLB) WriteStatus(ctx context.Context, obj any, p *Pool, stats addrpool.Stats) error {
	if s.res == nil {
		return nil
	}
	cur, err := asMetalLBPool(obj)
	if err != nil {
		return err
	}
	if !p.Valid {
		stats = addrpool.Stats{}
	}
	desired := cur.DeepCopy()
	desired.Status.AssignedIPv4, desired.Status.AvailableIPv4 = stats.AssignedIPv4, stats.AvailableIPv4
	desired.Status.AssignedIPv6, desired.Status.AvailableIPv6 = stats.AssignedIPv6, stats.AvailableIPv6
	if desired.Status == cur.Status {
		return nil
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
	if err != nil {
		return err
	}
	uo := &unstructured.Unstructured{Object: u}
	uo.SetGroupVersionKind(mlb.GroupVersion.WithKind("IPAddressPool"))
	if _, err := s.res.UpdateStatus(ctx, uo, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating MetalLB pool status: %w", err)
	}
	return nil
}
