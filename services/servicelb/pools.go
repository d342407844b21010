package servicelb

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

// poolInfo is an IPAddressPool parsed and checked: what allocation works from.
type poolInfo struct {
	name       string
	generation int64
	pool       addrpool.Pool
	autoAssign bool
	priority   int32
	namespaces map[string]bool // nil: any
	nsSelector labels.Selector // nil: any
	svcSelect  labels.Selector // nil: any
	// valid is false when the spec cannot be used; reason and message say why, for the
	// pool's Valid condition. An invalid pool hands out nothing.
	valid           bool
	reason, message string
}

// parsePools checks every pool on its own, then for overlaps: of two pools sharing an
// address the older (by creation, then name) stays valid, so creating a pool can never take
// addresses away from Services that already hold them.
func parsePools(objs []*v1alpha1.IPAddressPool) map[string]*poolInfo {
	objs = slices.Clone(objs)
	slices.SortFunc(objs, func(a, b *v1alpha1.IPAddressPool) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	out := make(map[string]*poolInfo, len(objs))
	var valid []addrpool.Pool
	for _, o := range objs {
		pi := parsePool(o)
		out[pi.name] = pi
		if pi.valid {
			valid = append(valid, pi.pool)
		}
	}
	for name, other := range addrpool.Overlaps(valid) {
		pi := out[name]
		pi.valid, pi.reason = false, v1alpha1.ReasonOverlapping
		pi.message = fmt.Sprintf("addresses overlap with the older pool %s; this pool is not used until the overlap is removed", other)
	}
	return out
}

func parsePool(o *v1alpha1.IPAddressPool) *poolInfo {
	pi := &poolInfo{
		name:       o.Name,
		generation: o.Generation,
		autoAssign: o.Spec.AutoAssignEnabled(),
		priority:   o.Spec.Priority,
		pool:       addrpool.Pool{Name: o.Name, AvoidBuggyIPs: o.Spec.AvoidBuggyIPs},
		valid:      true,
		reason:     v1alpha1.ReasonValid,
		message:    "the pool is in use",
	}
	invalid := func(reason, format string, args ...any) *poolInfo {
		pi.valid, pi.reason, pi.message = false, reason, fmt.Sprintf(format, args...)
		return pi
	}
	if len(o.Spec.Addresses) == 0 {
		return invalid(v1alpha1.ReasonInvalidAddresses, "spec.addresses is empty")
	}
	for _, s := range o.Spec.Addresses {
		r, err := addrpool.ParseRange(s)
		if err != nil {
			return invalid(v1alpha1.ReasonInvalidAddresses, "spec.addresses: %v", err)
		}
		pi.pool.Ranges = append(pi.pool.Ranges, r)
	}
	if a, b, ok := addrpool.RangesOverlap(pi.pool.Ranges); ok {
		return invalid(v1alpha1.ReasonInvalidAddresses, "spec.addresses: %s and %s overlap", a, b)
	}
	if len(o.Spec.Namespaces) > 0 {
		pi.namespaces = map[string]bool{}
		for _, ns := range o.Spec.Namespaces {
			pi.namespaces[ns] = true
		}
	}
	var err error
	if o.Spec.NamespaceSelector != nil {
		if pi.nsSelector, err = metav1.LabelSelectorAsSelector(o.Spec.NamespaceSelector); err != nil {
			return invalid(v1alpha1.ReasonInvalidSelector, "spec.namespaceSelector: %v", err)
		}
	}
	if o.Spec.ServiceSelector != nil {
		if pi.svcSelect, err = metav1.LabelSelectorAsSelector(o.Spec.ServiceSelector); err != nil {
			return invalid(v1alpha1.ReasonInvalidSelector, "spec.serviceSelector: %v", err)
		}
	}
	return pi
}

// admits reports whether svc, in a namespace with nsLabels, may use the pool at all.
func (pi *poolInfo) admits(svc *v1.Service, nsLabels labels.Set) bool {
	if !pi.valid {
		return false
	}
	if pi.namespaces != nil && !pi.namespaces[svc.Namespace] {
		return false
	}
	if pi.nsSelector != nil && !pi.nsSelector.Matches(nsLabels) {
		return false
	}
	if pi.svcSelect != nil && !pi.svcSelect.Matches(labels.Set(svc.Labels)) {
		return false
	}
	return true
}

// candidatePools returns, in order of preference, the pools svc may get an address from
// without asking for a specific one: the pool it names if any (autoAssign does not matter
// then), else every admitting pool with autoAssign, by priority then name. A named pool that
// does not exist or does not admit svc yields an error that says which.
func candidatePools(pools map[string]*poolInfo, svc *v1.Service, nsLabels labels.Set) ([]string, error) {
	if want := strings.TrimSpace(svc.Annotations[AnnotationAddressPool]); want != "" {
		pi, ok := pools[want]
		switch {
		case !ok:
			return nil, fmt.Errorf("address pool %q (annotation %s) does not exist", want, AnnotationAddressPool)
		case !pi.valid:
			return nil, fmt.Errorf("address pool %q (annotation %s) is not valid: %s", want, AnnotationAddressPool, pi.message)
		case !pi.admits(svc, nsLabels):
			return nil, fmt.Errorf("address pool %q (annotation %s) does not admit this Service (namespaces or selectors)", want, AnnotationAddressPool)
		}
		return []string{want}, nil
	}
	var out []*poolInfo
	for _, pi := range pools {
		if pi.autoAssign && pi.admits(svc, nsLabels) {
			out = append(out, pi)
		}
	}
	slices.SortFunc(out, func(a, b *poolInfo) int {
		if c := cmp.Compare(a.priority, b.priority); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	names := make([]string, len(out))
	for i, pi := range out {
		names[i] = pi.name
	}
	return names, nil
}

// admittingPoolsFor returns the names of the pools that contain addr and admit svc, whatever
// their autoAssign: where an explicitly requested address may come from.
func admittingPoolsFor(pools map[string]*poolInfo, svc *v1.Service, nsLabels labels.Set) []string {
	var out []string
	for _, pi := range pools {
		if pi.admits(svc, nsLabels) {
			out = append(out, pi.name)
		}
	}
	slices.Sort(out)
	return out
}
