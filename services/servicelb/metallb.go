// MetalLB's API as a pool source: metallb.io/v1beta1 IPAddressPool read with MetalLB's own Go
// types (go.universe.tf/metallb/api/v1beta1), and MetalLB's Service annotations.
//
// Importing that package adds sigs.k8s.io/controller-runtime v0.20.4 to the module graph (its
// pkg/scheme and pkg/conversion only, which build with client-go v0.36): the least bad way,
// since the alternative, a copy of MetalLB's types, is what the project rules forbid and
// would drift from MetalLB's schema unnoticed.

package servicelb

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

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

// metalLBKeyPrefix makes a MetalLB pool's key here: kcm-split pool names cannot contain a
// slash, so the two APIs' pools never share a key.
const metalLBKeyPrefix = "metallb.io/"

// metalLBKey is the key of the MetalLB pool named name.
func metalLBKey(name string) string { return metalLBKeyPrefix + name }

// poolLabels splits a pool key into the api and pool labels of the gauges.
func poolLabels(key string) (api, pool string) {
	if name, ok := strings.CutPrefix(key, metalLBKeyPrefix); ok {
		return PoolAPIMetalLB, name
	}
	return PoolAPIKCMSplit, key
}

// isMetalLBPool reports whether key is a MetalLB pool's.
func isMetalLBPool(key string) bool { return strings.HasPrefix(key, metalLBKeyPrefix) }

// displayPool is how messages name a pool: its key (MetalLB's carry "metallb.io/").
func displayPool(key string) string { return key }

// annotationValue returns the value of the first of names present on svc (present and
// empty counts, as in MetalLB), and that name.
func annotationValue(svc *v1.Service, names ...string) (string, string, bool) {
	for _, n := range names {
		if v, ok := svc.Annotations[n]; ok {
			return v, n, true
		}
	}
	return "", "", false
}

// namedPool returns the key of the pool svc names by annotation, API by API in the order of
// apis, and the annotation; "" when it names none.
func namedPool(svc *v1.Service, apis []string) (key, annotation string) {
	for _, api := range apis {
		switch api {
		case PoolAPIKCMSplit:
			if v := strings.TrimSpace(svc.Annotations[AnnotationAddressPool]); v != "" {
				return v, AnnotationAddressPool
			}
		case PoolAPIMetalLB:
			if v, n, ok := annotationValue(svc, AnnotationMetalLBAddressPool, LegacyAnnotationMetalLBAddressPool); ok && strings.TrimSpace(v) != "" {
				return metalLBKey(strings.TrimSpace(v)), n
			}
		}
	}
	return "", ""
}

// sharingKey is svc's sharing key: kcm-split's annotation, else MetalLB's (current, then
// legacy). Read whatever --pool-api says, so an address shared under one API stays shared
// when the other is enabled too.
func sharingKey(svc *v1.Service) string {
	if v := strings.TrimSpace(svc.Annotations[AnnotationAllowSharedIP]); v != "" {
		return v
	}
	v, _, _ := annotationValue(svc, AnnotationMetalLBAllowSharedIP, LegacyAnnotationMetalLBSharedIP)
	return strings.TrimSpace(v)
}

// requestedIPsFor returns the addresses svc asks for, by family, reading the annotations of
// the APIs in apis in their order, then spec.loadBalancerIP. As in MetalLB, a Service with
// both MetalLB's loadBalancerIPs annotation and spec.loadBalancerIP asks for nothing valid.
func requestedIPsFor(svc *v1.Service, fams []addrpool.Family, apis []string) (map[addrpool.Family]netip.Addr, error) {
	for _, api := range apis {
		switch api {
		case PoolAPIKCMSplit:
			if raw := svc.Annotations[AnnotationLoadBalancerIPs]; strings.TrimSpace(raw) != "" {
				return parseRequested(svc, raw, "annotation "+AnnotationLoadBalancerIPs, fams)
			}
		case PoolAPIMetalLB:
			raw, name, ok := annotationValue(svc, AnnotationMetalLBLoadBalancerIPs, LegacyAnnotationMetalLBLBIPs)
			if !ok || strings.TrimSpace(raw) == "" {
				continue
			}
			if strings.TrimSpace(svc.Spec.LoadBalancerIP) != "" {
				return nil, fmt.Errorf("annotation %s and spec.loadBalancerIP are both set; MetalLB's rules allow only one", name)
			}
			return parseRequested(svc, raw, "annotation "+name, fams)
		}
	}
	if raw := svc.Spec.LoadBalancerIP; strings.TrimSpace(raw) != "" {
		return parseRequested(svc, raw, "spec.loadBalancerIP", fams)
	}
	return nil, nil
}

// parseMetalLBPool parses a MetalLB IPAddressPool into what allocation works from, with
// MetalLB's validity rules for one pool (addresses, selectors, duplicate namespaces).
func parseMetalLBPool(o *mlb.IPAddressPool) *poolInfo {
	pi := &poolInfo{
		name:       metalLBKey(o.Name),
		api:        PoolAPIMetalLB,
		objName:    o.Name,
		generation: o.Generation,
		autoAssign: o.Spec.AutoAssign == nil || *o.Spec.AutoAssign,
		pool:       addrpool.Pool{Name: metalLBKey(o.Name), AvoidBuggyIPs: o.Spec.AvoidBuggyIPs},
		valid:      true,
		reason:     "Valid",
		message:    "the pool is in use",
	}
	invalid := func(format string, args ...any) *poolInfo {
		pi.valid, pi.reason, pi.message = false, "Invalid", fmt.Sprintf(format, args...)
		return pi
	}
	if len(o.Spec.Addresses) == 0 {
		return invalid("spec.addresses is empty")
	}
	for _, s := range o.Spec.Addresses {
		r, err := addrpool.ParseRange(s)
		if err != nil {
			return invalid("spec.addresses: %v", err)
		}
		pi.pool.Ranges = append(pi.pool.Ranges, r)
	}
	if a, b, ok := addrpool.RangesOverlap(pi.pool.Ranges); ok {
		return invalid("spec.addresses: %s and %s overlap", a, b)
	}
	sa := o.Spec.AllocateTo
	if sa == nil {
		return pi
	}
	pi.pinned = true
	pi.priority = int32(min(max(sa.Priority, 0), 1<<31-1))
	for _, ns := range sa.Namespaces {
		if pi.namespaces == nil {
			pi.namespaces = map[string]bool{}
		}
		if pi.namespaces[ns] {
			return invalid("spec.serviceAllocation.namespaces: %s twice", ns)
		}
		pi.namespaces[ns] = true
	}
	for i := range sa.NamespaceSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&sa.NamespaceSelectors[i])
		if err != nil {
			return invalid("spec.serviceAllocation.namespaceSelectors: %v", err)
		}
		pi.nsAny = append(pi.nsAny, sel)
	}
	for i := range sa.ServiceSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&sa.ServiceSelectors[i])
		if err != nil {
			return invalid("spec.serviceAllocation.serviceSelectors: %v", err)
		}
		pi.svcAny = append(pi.svcAny, sel)
	}
	return pi
}

// metalLBAdmits is MetalLB's serviceAllocation rule: the namespace must be listed or match
// a namespace selector (when any is given), and the Service must match a service selector
// (when any is given).
func (pi *poolInfo) metalLBAdmits(svc *v1.Service, nsLabels labels.Set) bool {
	if len(pi.namespaces) > 0 || len(pi.nsAny) > 0 {
		ok := pi.namespaces[svc.Namespace]
		for _, sel := range pi.nsAny {
			ok = ok || sel.Matches(nsLabels)
		}
		if !ok {
			return false
		}
	}
	if len(pi.svcAny) == 0 {
		return true
	}
	return slices.ContainsFunc(pi.svcAny, func(sel labels.Selector) bool { return sel.Matches(labels.Set(svc.Labels)) })
}

// metalLBPoolsFrom converts the objects of the MetalLB pool cache (typed by
// metalLBTransform, or unstructured from an informer without it).
func metalLBPoolsFrom(objs []any) ([]*mlb.IPAddressPool, error) {
	var out []*mlb.IPAddressPool
	for _, o := range objs {
		p, err := asMetalLBPool(o)
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

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

// metalLBTransform is the MetalLB pool informer's transform: the cache keeps MetalLB's typed
// object without managedFields, which nothing here reads.
func metalLBTransform(obj any) (any, error) {
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

// metalLBStatusWriter writes MetalLB pools' status: the four counters MetalLB v0.15.2's
// controller keeps there (internal/k8s/controllers/pool_status_controller.go), nothing else.
type metalLBStatusWriter struct {
	res       dynamic.ResourceInterface
	namespace string
}

func newMetalLBStatusWriter(d dynamic.Interface, namespace string) *metalLBStatusWriter {
	if d == nil {
		return nil
	}
	return &metalLBStatusWriter{res: d.Resource(MetalLBGroupVersionResource).Namespace(namespace), namespace: namespace}
}

// update writes p's status; p's resourceVersion guards against lost updates.
func (w *metalLBStatusWriter) update(ctx context.Context, p *mlb.IPAddressPool) error {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(mlb.GroupVersion.WithKind("IPAddressPool"))
	_, err = w.res.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}
