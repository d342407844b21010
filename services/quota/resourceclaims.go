package quota

import (
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/featuregate"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"

	"github.com/kcm-split/kcm-split/shared/features"
)

// ResourceClaim (DRA) usage, as the apiserver's ResourceQuota admission charges it: devices
// per DeviceClass, and with DRAExtendedResource the extended resources those devices stand
// for, less what the Pod a claim was generated for is already charged.

// ClaimOptions say how ResourceClaims are charged; set from the feature gates.
type ClaimOptions struct {
	// Devices: DynamicResourceAllocation.
	Devices bool
	// ExtendedResources: DRAExtendedResource (only with Devices).
	ExtendedResources bool
}

// Claims returns how claims are charged under gates, as upstream's registry decides it.
func Claims(gates featuregate.FeatureGate) ClaimOptions {
	dra := gates.Enabled(features.DynamicResourceAllocation)
	return ClaimOptions{Devices: dra, ExtendedResources: dra && gates.Enabled(features.DRAExtendedResource)}
}

// claimCountName is the object count of claims, which the claim evaluator measures itself.
var claimCountName = countName(claimsResource)

// claimTracks reports whether name is measured from ResourceClaims alone: their count, or
// devices of one class (<class>.deviceclass.resource.k8s.io/devices).
func claimTracks(name v1.ResourceName, o ClaimOptions) bool {
	if name == claimCountName {
		return true
	}
	return o.Devices && strings.HasSuffix(string(name), v1.ResourceClaimsPerClass)
}

// claimSharesWithPods reports whether name is an extended resource that both Pods (what their
// containers ask) and claims (the devices a class provides for it) are charged.
func claimSharesWithPods(name v1.ResourceName, o ClaimOptions) bool {
	return o.ExtendedResources && isExtendedForQuota(name)
}

// isExtendedForQuota is an extended resource as quota names it: requests.<name>, where name is
// not native or is a class's implicit deviceclass.resource.kubernetes.io/<class>.
func isExtendedForQuota(name v1.ResourceName) bool {
	s := string(name)
	if !strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return !isNative(name) || strings.HasPrefix(s, v1.ResourceImplicitExtendedClaimsPerClass)
}

// maxDevices is the worst case of one request or subrequest: ExactCount its count, All as
// many devices as an allocation can hold. Modes this version does not know (after a
// downgrade) are charged nothing.
func maxDevices(mode resourceapi.DeviceAllocationMode, count int64) int64 {
	switch mode {
	case resourceapi.DeviceAllocationModeExactCount:
		return count
	case resourceapi.DeviceAllocationModeAll:
		return resourceapi.AllocationResultsMaxSize
	}
	return 0
}

// classDevices is the devices name of a class.
func classDevices(class string) v1.ResourceName {
	return v1.ResourceName(class + v1.ResourceClaimsPerClass)
}

// claimDeviceUsage returns the count and the devices per class of one claim. A request with
// alternatives (firstAvailable) is charged, per class, the most any of them could allocate.
// Admin access is charged like any other request: upstream exempts no one.
func claimDeviceUsage(claim *resourceapi.ResourceClaim) v1.ResourceList {
	out := v1.ResourceList{claimCountName: *resource.NewQuantity(1, resource.DecimalSI)}
	add := func(name v1.ResourceName, n int64) {
		q := out[name]
		q.Add(*resource.NewQuantity(n, resource.DecimalSI))
		out[name] = q
	}
	for _, req := range claim.Spec.Devices.Requests {
		switch {
		case len(req.FirstAvailable) > 0:
			worst := map[v1.ResourceName]int64{}
			for _, sub := range req.FirstAvailable {
				name := classDevices(sub.DeviceClassName)
				if n := maxDevices(sub.AllocationMode, sub.Count); n > worst[name] {
					worst[name] = n
				}
			}
			for name, n := range worst {
				add(name, n)
			}
		case req.Exactly != nil:
			add(classDevices(req.Exactly.DeviceClassName), maxDevices(req.Exactly.AllocationMode, req.Exactly.Count))
		}
		// A request of a kind this version does not know cannot be charged.
	}
	return out
}

// claimEvaluator charges claims. Only the extended-resource part reads more than the claim.
type claimEvaluator struct {
	opts ClaimOptions
	// classes maps classes to the extended resources they provide (nil: none known).
	classes *extendedresourcecache.ExtendedResourceCache
	// pod returns a cached Pod (nil: not found or not cached).
	pod func(namespace, name string) *v1.Pod
	// ownedBy returns the claims generated for one Pod, by its UID.
	ownedBy func(namespace string, uid types.UID) []*resourceapi.ResourceClaim
	// charge is what a Pod is charged (Options.PodResources).
	charge resourcehelper.PodResourcesOptions
}

func (e claimEvaluator) usage(claim *resourceapi.ResourceClaim, now time.Time) v1.ResourceList {
	out := claimDeviceUsage(claim)
	if !e.opts.Devices {
		return v1.ResourceList{claimCountName: out[claimCountName]}
	}
	if !e.opts.ExtendedResources {
		return out
	}
	// The extended resources the claim's devices stand for: the class's implicit name always,
	// its declared extended resource name too. Sorted: should two classes declare the same
	// name (a migration between them), the outcome does not depend on map order.
	classes := make([]string, 0, len(out))
	for name := range out {
		if class, ok := strings.CutSuffix(string(name), v1.ResourceClaimsPerClass); ok && class != "" {
			classes = append(classes, class)
		}
	}
	sort.Strings(classes)
	extended := map[v1.ResourceName]resource.Quantity{}
	for _, class := range classes {
		q := out[classDevices(class)]
		extended[v1.ResourceName(v1.ResourceImplicitExtendedClaimsPerClass+class)] = q
		if ext := e.classes.GetExtendedResource(class); ext != "" {
			extended[v1.ResourceName(v1.DefaultResourceRequestsPrefix+ext)] = q
		}
	}
	podCharged := e.verifiedPodUsage(claim, now)
	for name, q := range extended {
		// A name no DeviceClass provides is left to the Pods alone, as upstream's evaluator
		// does not match it.
		if e.classes.GetDeviceClass(v1.ResourceName(strings.TrimPrefix(string(name), v1.DefaultResourceRequestsPrefix))) == nil {
			continue
		}
		// What the owning Pod is charged for it already is not charged twice.
		if p, ok := podCharged[name]; ok {
			q.Sub(p)
		}
		if q.Sign() > 0 {
			out[name] = q
		}
	}
	return out
}

// verifiedPodUsage returns what the Pod a claim was generated for is charged, when the claim
// really is that Pod's extended-resource claim: annotated so, controlled by a Pod that exists
// with the same UID, and named by the Pod's status or, while the status names none, the
// oldest such claim of the Pod (the name breaks a tie). Otherwise nil: the claim is charged in
// full.
func (e claimEvaluator) verifiedPodUsage(claim *resourceapi.ResourceClaim, now time.Time) v1.ResourceList {
	owner := extendedClaimOwner(claim)
	if owner == nil || e.pod == nil {
		return nil
	}
	pod := e.pod(claim.Namespace, owner.Name)
	if pod == nil || pod.UID != owner.UID {
		return nil
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		if st.ResourceClaimName != claim.Name {
			return nil
		}
	} else if e.ownedBy != nil {
		for _, other := range e.ownedBy(claim.Namespace, pod.UID) {
			switch other.CreationTimestamp.Compare(claim.CreationTimestamp.Time) {
			case -1:
				return nil
			case 0:
				if other.Name < claim.Name {
					return nil
				}
			}
		}
	}
	used, _ := podUsage(pod, now, e.charge)
	return used
}

// extendedClaimOwner is the Pod a claim was generated for, to carry that Pod's extended
// resources: nil unless annotated so and controlled by a v1 Pod.
func extendedClaimOwner(claim *resourceapi.ResourceClaim) *metav1.OwnerReference {
	if claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
		return nil
	}
	ref := metav1.GetControllerOfNoCopy(claim)
	if ref == nil || ref.Kind != "Pod" || ref.APIVersion != "v1" {
		return nil
	}
	return ref
}

// claimOwnerIndex indexes extended-resource claims by namespace/UID of their Pod.
const claimOwnerIndex = "extendedResourceClaimPodOwner"

func claimOwnerKey(namespace string, uid types.UID) string { return namespace + "/" + string(uid) }

func indexClaimOwner(obj any) ([]string, error) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return nil, nil
	}
	if ref := extendedClaimOwner(claim); ref != nil {
		return []string{claimOwnerKey(claim.Namespace, ref.UID)}, nil
	}
	return nil, nil
}

// claimUsageChanged reports whether an update can change what quotas charge for the claim.
// Its requests are immutable; whether it is a Pod's extended-resource claim (annotation,
// controller) is not.
func claimUsageChanged(old, cur *resourceapi.ResourceClaim) bool {
	if !equalUsage(claimDeviceUsage(old), claimDeviceUsage(cur)) {
		return true
	}
	a, b := extendedClaimOwner(old), extendedClaimOwner(cur)
	if (a == nil) != (b == nil) {
		return true
	}
	return a != nil && (a.UID != b.UID || a.Name != b.Name)
}

// trimClaim keeps what the evaluator reads: the requests' classes, modes and counts, and the
// annotation and controller that make a claim a Pod's extended-resource claim.
func trimClaim(obj any) (any, error) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return obj, nil
	}
	m := &claim.ObjectMeta
	m.ManagedFields = nil
	m.Labels = nil
	m.Finalizers = nil
	keepOnlyAnnotation(m, resourceapi.ExtendedResourceClaimAnnotation)
	if ref := metav1.GetControllerOfNoCopy(claim); ref != nil {
		m.OwnerReferences = []metav1.OwnerReference{*ref}
	} else {
		m.OwnerReferences = nil
	}
	requests := make([]resourceapi.DeviceRequest, len(claim.Spec.Devices.Requests))
	for i, r := range claim.Spec.Devices.Requests {
		out := resourceapi.DeviceRequest{Name: r.Name}
		if r.Exactly != nil {
			out.Exactly = &resourceapi.ExactDeviceRequest{
				DeviceClassName: r.Exactly.DeviceClassName,
				AllocationMode:  r.Exactly.AllocationMode,
				Count:           r.Exactly.Count,
			}
		}
		for _, s := range r.FirstAvailable {
			out.FirstAvailable = append(out.FirstAvailable, resourceapi.DeviceSubRequest{
				Name: s.Name, DeviceClassName: s.DeviceClassName, AllocationMode: s.AllocationMode, Count: s.Count,
			})
		}
		requests[i] = out
	}
	claim.Spec = resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}}
	claim.Status = resourceapi.ResourceClaimStatus{}
	return claim, nil
}

// trimDeviceClass keeps what the extended-resource cache reads: name, creation time and the
// extended resource name.
func trimDeviceClass(obj any) (any, error) {
	class, ok := obj.(*resourceapi.DeviceClass)
	if !ok {
		return obj, nil
	}
	class.ObjectMeta = metav1.ObjectMeta{
		Name: class.Name, UID: class.UID, ResourceVersion: class.ResourceVersion,
		CreationTimestamp: class.CreationTimestamp, DeletionTimestamp: class.DeletionTimestamp,
	}
	class.Spec = resourceapi.DeviceClassSpec{ExtendedResourceName: class.Spec.ExtendedResourceName}
	return class, nil
}
