package servicelb

import (
	"cmp"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

// poolInfo is an IPAddressPool parsed and checked: what allocation works from.
type poolInfo struct {
	// name is the pool's key here (its object name for kcm-split pools, metalLBKey of it
	// for MetalLB's); api is PoolAPIKCMSplit or PoolAPIMetalLB, objName the object's name.
	name       string
	api        string
	objName    string
	generation int64
	pool       addrpool.Pool
	autoAssign bool
	priority   int32
	namespaces map[string]bool // nil: any
	nsSelector labels.Selector // nil: any
	svcSelect  labels.Selector // nil: any
	// MetalLB's serviceAllocation (api PoolAPIMetalLB only): pinned says it is set; the
	// namespace is admitted when it is in namespaces or matches one of nsAny (no
	// restriction when both are empty), the Service when it matches one of svcAny (none:
	// any).
	pinned bool
	nsAny  []labels.Selector
	svcAny []labels.Selector
	// valid is false when the spec cannot be used; reason and message say why, for the
	// pool's Valid condition. An invalid pool hands out nothing.
	valid           bool
	reason, message string
}

// parsePools checks every pool on its own, then for overlaps: of two pools sharing an
// address the older (by creation, then name) stays valid, so creating a pool can never take
// addresses away from Services that already hold them.
func parsePools(objs []*v1alpha1.IPAddressPool) map[string]*poolInfo {
	var parsed []parsedPool
	for _, o := range objs {
		parsed = append(parsed, parsedPool{created: o.CreationTimestamp, info: parsePool(o)})
	}
	return checkOverlaps(parsed)
}

// parsedPool is one pool of either API, parsed, with its creation time for checkOverlaps.
type parsedPool struct {
	created metav1.Time
	info    *poolInfo
}

// checkOverlaps keys the pools by name and marks invalid the younger of two pools sharing an
// address, whatever API each comes from.
func checkOverlaps(parsed []parsedPool) map[string]*poolInfo {
	parsed = slices.Clone(parsed)
	slices.SortFunc(parsed, func(a, b parsedPool) int {
		if c := a.created.Compare(b.created.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.info.name, b.info.name)
	})
	out := make(map[string]*poolInfo, len(parsed))
	var valid []addrpool.Pool
	for _, p := range parsed {
		pi := p.info
		out[pi.name] = pi
		if pi.valid {
			valid = append(valid, pi.pool)
		}
	}
	for name, other := range addrpool.Overlaps(valid) {
		pi := out[name]
		pi.valid, pi.reason = false, v1alpha1.ReasonOverlapping
		pi.message = fmt.Sprintf("addresses overlap with the older pool %s; this pool is not used until the overlap is removed", out[other].describe())
	}
	return out
}

func parsePool(o *v1alpha1.IPAddressPool) *poolInfo {
	pi := &poolInfo{
		name:       o.Name,
		api:        PoolAPIKCMSplit,
		objName:    o.Name,
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
	if pi.api == PoolAPIMetalLB {
		return pi.metalLBAdmits(svc, nsLabels)
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

// candidatePools is candidatePoolsFor with the project's own pool API only.
func candidatePools(pools map[string]*poolInfo, svc *v1.Service, nsLabels labels.Set) ([]string, error) {
	return candidatePoolsFor(pools, svc, nsLabels, []string{PoolAPIKCMSplit})
}

// candidatePoolsFor returns, in order of preference, the pools svc may get an address from
// without asking for a specific one: the pool it names if any (autoAssign does not matter
// then), else every admitting pool with autoAssign, API by API in the order of apis (see
// autoPools). A named pool that does not exist or does not admit svc yields an error that
// says which.
func candidatePoolsFor(pools map[string]*poolInfo, svc *v1.Service, nsLabels labels.Set, apis []string) ([]string, error) {
	if want, annotation := namedPool(svc, apis); want != "" {
		pi, ok := pools[want]
		shown := displayPool(want)
		switch {
		case !ok:
			return nil, fmt.Errorf("address pool %q (annotation %s) does not exist", shown, annotation)
		case !pi.valid:
			return nil, fmt.Errorf("address pool %q (annotation %s) is not valid: %s", shown, annotation, pi.message)
		case !pi.admits(svc, nsLabels):
			return nil, fmt.Errorf("address pool %q (annotation %s) does not admit this Service (namespaces or selectors)", shown, annotation)
		}
		return []string{want}, nil
	}
	var names []string
	for _, api := range apis {
		names = append(names, autoPools(pools, svc, nsLabels, api)...)
	}
	return names, nil
}

// autoPools returns the pools of api that svc may get an address from automatically, in
// order. kcm-split: by priority (lower first), then name. MetalLB: first the pools whose
// serviceAllocation admits svc (by priority, a priority of 0 after every other, then name),
// then those without serviceAllocation, by name (MetalLB's controller takes them in map
// order; name order is a deterministic choice among its possible ones).
func autoPools(pools map[string]*poolInfo, svc *v1.Service, nsLabels labels.Set, api string) []string {
	var out []*poolInfo
	for _, pi := range pools {
		if pi.api == api && pi.autoAssign && pi.admits(svc, nsLabels) {
			out = append(out, pi)
		}
	}
	rank := func(pi *poolInfo) (group int, prio int32) {
		if api != PoolAPIMetalLB {
			return 0, pi.priority
		}
		switch {
		case !pi.pinned:
			return 2, 0
		case pi.priority == 0:
			return 1, 0
		}
		return 0, pi.priority
	}
	slices.SortFunc(out, func(a, b *poolInfo) int {
		ga, pa := rank(a)
		gb, pb := rank(b)
		if c := cmp.Compare(ga, gb); c != 0 {
			return c
		}
		if c := cmp.Compare(pa, pb); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	names := make([]string, len(out))
	for i, pi := range out {
		names[i] = pi.name
	}
	return names
}

// describe names the pool for messages: its object name, with the API for MetalLB's.
func (pi *poolInfo) describe() string {
	if pi == nil {
		return ""
	}
	return displayPool(pi.name)
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
