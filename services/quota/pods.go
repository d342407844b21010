package quota

import (
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Pod usage, as the apiserver's ResourceQuota admission charges it: the controller must never
// compute a different number than admission does, or every create near a limit flips between
// allowed and refused.

// podComputeNames are the fixed names the pod evaluator measures.
var podComputeNames = []v1.ResourceName{
	"count/pods",
	v1.ResourcePods,
	v1.ResourceCPU,
	v1.ResourceMemory,
	v1.ResourceEphemeralStorage,
	v1.ResourceRequestsCPU,
	v1.ResourceRequestsMemory,
	v1.ResourceRequestsEphemeralStorage,
	v1.ResourceLimitsCPU,
	v1.ResourceLimitsMemory,
	v1.ResourceLimitsEphemeralStorage,
}

// deviceClassPrefix names the implicit extended resource of a DRA device class.
const deviceClassPrefix = "deviceclass.resource.kubernetes.io/"

// podTracks reports whether name is measured from Pods.
func podTracks(name v1.ResourceName) bool {
	if slices.Contains(podComputeNames, name) {
		return true
	}
	s := string(name)
	if strings.HasPrefix(s, v1.ResourceHugePagesPrefix) || strings.HasPrefix(s, v1.ResourceRequestsHugePagesPrefix) {
		return true
	}
	// Extended resources are quota'd only as requests.<name>: they cannot be overcommitted,
	// so their limits carry no information.
	if !strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return !isNative(name) || strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix+deviceClassPrefix)
}

// isNative reports whether name belongs to kubernetes.io: unprefixed names do implicitly.
func isNative(name v1.ResourceName) bool {
	s := string(name)
	return !strings.Contains(s, "/") || strings.Contains(s, v1.ResourceDefaultNamespacePrefix)
}

// isExtended reports whether a container resource name is an extended resource that quota
// tracks as requests.<name>.
func isExtended(name v1.ResourceName) bool {
	s := string(name)
	if strings.HasPrefix(s, deviceClassPrefix) {
		return true
	}
	if isNative(name) || strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+s)) == 0
}

// podChargeable reports whether a Pod's compute resources are charged at now, and if they
// stop being charged later (a deleting Pod whose grace period ends), after how long.
// Terminal Pods are free; so are Pods stuck deleting past their grace period (a lost node
// must not block a replacement).
func podChargeable(pod *v1.Pod, now time.Time) (bool, time.Duration) {
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return false, 0
	}
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil {
		end := pod.DeletionTimestamp.Add(time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second)
		if now.After(end) {
			return false, 0
		}
		// Admission compares with "after": one nanosecond past the end is free.
		return true, end.Sub(now) + time.Nanosecond
	}
	return true, 0
}

// podUsage returns the usage of one Pod and, when it changes with time alone, after how long.
// count/pods counts every Pod in storage; everything else, "pods" included, only Pods that
// are still charged.
// charge says which of the Pod's resources count (see Options.PodResources).
func podUsage(pod *v1.Pod, now time.Time, charge resourcehelper.PodResourcesOptions) (v1.ResourceList, time.Duration) {
	out := v1.ResourceList{"count/pods": *resource.NewQuantity(1, resource.DecimalSI)}
	charged, recheck := podChargeable(pod, now)
	if !charged {
		return out, 0
	}
	if pod.Spec.Resources != nil && pod.Spec.Overhead != nil {
		// The helpers return pod-level quantities uncopied and then add the overhead to them
		// in place, which for an arbitrary-precision quantity writes into the cached Pod that
		// other syncs read at the same time. Such Pods are rare: give the helpers a copy.
		pod = pod.DeepCopy()
	}
	requests := resourcehelper.PodRequests(pod, charge)
	limits := resourcehelper.PodLimits(pod, charge)
	out[v1.ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	for _, r := range []struct{ name, plain, req, lim v1.ResourceName }{
		{v1.ResourceCPU, v1.ResourceCPU, v1.ResourceRequestsCPU, v1.ResourceLimitsCPU},
		{v1.ResourceMemory, v1.ResourceMemory, v1.ResourceRequestsMemory, v1.ResourceLimitsMemory},
		{v1.ResourceEphemeralStorage, v1.ResourceEphemeralStorage, v1.ResourceRequestsEphemeralStorage, v1.ResourceLimitsEphemeralStorage},
	} {
		if q, ok := requests[r.name]; ok {
			out[r.plain] = q
			out[r.req] = q
		}
		if q, ok := limits[r.name]; ok {
			out[r.lim] = q
		}
	}
	for name, q := range requests {
		switch {
		case strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix):
			out[name] = q
			out[v1.DefaultResourceRequestsPrefix+name] = q
		case isExtended(name):
			out[v1.DefaultResourceRequestsPrefix+name] = q
		}
	}
	return out, recheck
}

// podTerminating is the Terminating scope: a Pod with an active deadline.
func podTerminating(pod *v1.Pod) bool {
	return pod.Spec.ActiveDeadlineSeconds != nil && *pod.Spec.ActiveDeadlineSeconds >= 0
}

// podBestEffort is the BestEffort scope: the QoS class the apiserver recorded, else computed
// as the apiserver does (no positive cpu or memory request or limit anywhere; with pod-level
// resources set, only those count).
func podBestEffort(pod *v1.Pod) bool {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass == v1.PodQOSBestEffort
	}
	positive := func(l v1.ResourceList) bool {
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			if q, ok := l[name]; ok && q.Sign() > 0 {
				return true
			}
		}
		return false
	}
	if pod.Spec.Resources != nil {
		return !positive(pod.Spec.Resources.Requests) && !positive(pod.Spec.Resources.Limits)
	}
	for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if positive(cs[i].Resources.Requests) || positive(cs[i].Resources.Limits) {
				return false
			}
		}
	}
	return true
}

// podCrossNamespaceAffinity is the CrossNamespacePodAffinity scope: any affinity or
// anti-affinity term that reaches beyond the Pod's own namespace.
func podCrossNamespaceAffinity(pod *v1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil {
		return false
	}
	cross := func(t *v1.PodAffinityTerm) bool { return len(t.Namespaces) > 0 || t.NamespaceSelector != nil }
	check := func(req []v1.PodAffinityTerm, pref []v1.WeightedPodAffinityTerm) bool {
		for i := range req {
			if cross(&req[i]) {
				return true
			}
		}
		for i := range pref {
			if cross(&pref[i].PodAffinityTerm) {
				return true
			}
		}
		return false
	}
	if a.PodAffinity != nil && check(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution) {
		return true
	}
	return a.PodAntiAffinity != nil && check(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
}

// podMatchesScope reports whether a Pod is in one scope requirement of a quota.
func podMatchesScope(sel v1.ScopedResourceSelectorRequirement, pod *v1.Pod) bool {
	switch sel.ScopeName {
	case v1.ResourceQuotaScopeTerminating:
		return podTerminating(pod)
	case v1.ResourceQuotaScopeNotTerminating:
		return !podTerminating(pod)
	case v1.ResourceQuotaScopeBestEffort:
		return podBestEffort(pod)
	case v1.ResourceQuotaScopeNotBestEffort:
		return !podBestEffort(pod)
	case v1.ResourceQuotaScopePriorityClass:
		return valueMatches(sel, pod.Spec.PriorityClassName)
	case v1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return podCrossNamespaceAffinity(pod)
	}
	return false
}

// valueMatches applies a scope selector's operator to a value; "" means the object has none.
// The semantics are those of a label selector on a one-key label set.
func valueMatches(sel v1.ScopedResourceSelectorRequirement, value string) bool {
	switch sel.Operator {
	case v1.ScopeSelectorOpExists:
		return value != ""
	case v1.ScopeSelectorOpDoesNotExist:
		return value == ""
	case v1.ScopeSelectorOpIn:
		return value != "" && slices.Contains(sel.Values, value)
	case v1.ScopeSelectorOpNotIn:
		return value == "" || !slices.Contains(sel.Values, value)
	}
	return false
}

// podUsageChanged reports whether an update can change what any quota charges for the Pod:
// its usage (turning terminal, a resize) or the scopes it falls in.
func podUsageChanged(old, cur *v1.Pod, now time.Time, charge resourcehelper.PodResourcesOptions) bool {
	if podTerminating(old) != podTerminating(cur) || podBestEffort(old) != podBestEffort(cur) {
		return true
	}
	// A deletion starts a grace period at whose end the Pod stops being charged: the sync
	// schedules itself for that moment.
	if old.DeletionTimestamp == nil && cur.DeletionTimestamp != nil {
		return true
	}
	// The claim carrying the Pod's extended resources is named: another claim of the Pod
	// may be charged them in full from now on.
	if extendedClaimName(old) != extendedClaimName(cur) {
		return true
	}
	a, _ := podUsage(old, now, charge)
	b, _ := podUsage(cur, now, charge)
	return !equalUsage(a, b)
}

func extendedClaimName(pod *v1.Pod) string {
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		return st.ResourceClaimName
	}
	return ""
}
