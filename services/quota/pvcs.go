package quota

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// storageClassInfix joins a StorageClass name and a resource in per-class quota names:
// <class>.storageclass.storage.k8s.io/requests.storage.
const storageClassInfix = ".storageclass.storage.k8s.io/"

// pvcTracks reports whether name is measured from PersistentVolumeClaims.
func pvcTracks(name v1.ResourceName) bool {
	switch name {
	case "count/persistentvolumeclaims", v1.ResourcePersistentVolumeClaims, v1.ResourceRequestsStorage:
		return true
	}
	s := string(name)
	return strings.HasSuffix(s, storageClassInfix+string(v1.ResourcePersistentVolumeClaims)) ||
		strings.HasSuffix(s, storageClassInfix+string(v1.ResourceRequestsStorage))
}

// pvcClass is the claim's StorageClass: the field, else the beta annotation older clients set.
func pvcClass(pvc *v1.PersistentVolumeClaim) string {
	if c, ok := pvc.Annotations[v1.BetaStorageClassAnnotation]; ok {
		return c
	}
	if pvc.Spec.StorageClassName != nil {
		return *pvc.Spec.StorageClassName
	}
	return ""
}

// pvcStorage is the storage a claim is charged for: its request rounded up to a whole byte,
// or what was allocated for it when that is larger (a failed expansion that was scaled back
// keeps its allocation until the volume really shrinks).
func pvcStorage(pvc *v1.PersistentVolumeClaim) (resource.Quantity, bool) {
	req, ok := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	if !ok {
		return resource.Quantity{}, false
	}
	out := roundUp(req)
	if alloc, ok := pvc.Status.AllocatedResources[v1.ResourceStorage]; ok && alloc.Cmp(out) > 0 {
		out = roundUp(alloc)
	}
	return out, true
}

func roundUp(q resource.Quantity) resource.Quantity {
	r := q.DeepCopy()
	r.RoundUp(0)
	return r
}

// pvcUsage returns the usage of one claim, overall and under its StorageClass.
func pvcUsage(pvc *v1.PersistentVolumeClaim) v1.ResourceList {
	one := *resource.NewQuantity(1, resource.DecimalSI)
	out := v1.ResourceList{
		"count/persistentvolumeclaims":    one,
		v1.ResourcePersistentVolumeClaims: one,
	}
	class := pvcClass(pvc)
	if class != "" {
		out[v1.ResourceName(class+storageClassInfix+string(v1.ResourcePersistentVolumeClaims))] = one
	}
	if storage, ok := pvcStorage(pvc); ok {
		out[v1.ResourceRequestsStorage] = storage
		if class != "" {
			out[v1.ResourceName(class+storageClassInfix+string(v1.ResourceRequestsStorage))] = storage
		}
	}
	return out
}

// pvcAttributeClasses are the VolumeAttributesClasses a claim refers to: requested, current
// and the target of a modification in progress.
func pvcAttributeClasses(pvc *v1.PersistentVolumeClaim) []string {
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if pvc.Spec.VolumeAttributesClassName != nil {
		add(*pvc.Spec.VolumeAttributesClassName)
	}
	if pvc.Status.CurrentVolumeAttributesClassName != nil {
		add(*pvc.Status.CurrentVolumeAttributesClassName)
	}
	if m := pvc.Status.ModifyVolumeStatus; m != nil {
		add(m.TargetVolumeAttributesClassName)
	}
	return out
}

// pvcMatchesScope is the VolumeAttributesClass scope, the only one claims have: a claim
// matches when any class it refers to does.
func pvcMatchesScope(sel v1.ScopedResourceSelectorRequirement, pvc *v1.PersistentVolumeClaim) bool {
	if sel.ScopeName != v1.ResourceQuotaScopeVolumeAttributesClass {
		return false
	}
	classes := pvcAttributeClasses(pvc)
	if len(classes) == 0 {
		return valueMatches(sel, "")
	}
	for _, c := range classes {
		if valueMatches(sel, c) {
			return true
		}
	}
	return false
}

// pvcUsageChanged reports whether an update changes what quotas charge for the claim: a
// resize (request or allocation) or a change of attribute classes.
func pvcUsageChanged(old, cur *v1.PersistentVolumeClaim) bool {
	if !equalUsage(pvcUsage(old), pvcUsage(cur)) {
		return true
	}
	return strings.Join(pvcAttributeClasses(old), ",") != strings.Join(pvcAttributeClasses(cur), ",")
}
