package quota

import (
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/kcm-split/kcm-split/shared/informer"
)

// The Pods' cache is the largest part of this controller's memory: a cluster has far more
// Pods than quotas, and a Pod's resources are maps of Quantities per container, per init
// container and again per container status. What any quota charges for a Pod is a function
// of the Pod alone (podUsage), except for one input that changes with time (podChargeable:
// phase and deletion grace). So the totals are worked out once, when the Pod is cached, and
// the cached Pod carries them as one container whose requests and limits are the totals, so
// that the evaluators read it exactly as they read the Pod it stands for.

// usageContainer names the one container of a compacted Pod.
const usageContainer = "quota-usage"

// crossNamespaceAffinity stands, in every compacted Pod that has one, for affinity or
// anti-affinity reaching beyond the Pod's namespace: the scope asks whether there is any,
// never which. Shared, like every cached object it is never written to.
var crossNamespaceAffinity = &v1.Affinity{PodAffinity: &v1.PodAffinity{
	RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{NamespaceSelector: &metav1.LabelSelector{}}},
}}

// podTransform returns the Pods' informer transform for what Pods are charged (charge, the
// same options the evaluator uses): compactPod where the compact Pod is charged and scoped
// exactly as the whole one, trimPod otherwise.
func podTransform(charge resourcehelper.PodResourcesOptions) func(any) (any, error) {
	// Options that make one container's resources count differently from the totals they
	// hold would break the equivalence: the Pods are then only trimmed. (The feature gates
	// never set them.)
	compactable := !charge.SkipContainerLevelResources && charge.NonMissingContainerRequests == nil &&
		charge.ContainerFn == nil && charge.Reuse == nil
	lists := &resourceLists{}
	return func(obj any) (any, error) {
		pod, ok := obj.(*v1.Pod)
		if !ok {
			return obj, nil
		}
		// A Pod without a recorded QoS class has its BestEffort scope worked out from its
		// containers, which the compact Pod no longer has. The apiserver records the class
		// of every Pod it creates, so this is only ever a Pod from elsewhere (a test).
		if !compactable || pod.Status.QOSClass == "" {
			return trimPod(pod)
		}
		return compactPod(pod, charge, lists), nil
	}
}

// compactPod returns a new Pod that every evaluator charges and scopes exactly as pod, under
// charge:
//   - usage: one container whose requests and limits are pod's totals (resourcehelper's
//     PodRequests and PodLimits of the whole Pod: init containers, sidecars, overhead,
//     pod-level resources, resize status all folded in); with no other container, no
//     overhead, no pod-level resources and no status, the same functions give back exactly
//     those totals;
//   - charged or not at a given time: phase, deletion timestamp and grace period;
//   - scopes: active deadline, QoS class, priority class, cross-namespace affinity;
//   - claims: namespace, name, UID, the extended-resource claim's name.
//
// evaluators_test.go checks this over generated Pods.
func compactPod(pod *v1.Pod, charge resourcehelper.PodResourcesOptions, lists *resourceLists) *v1.Pod {
	requests := resourcehelper.PodRequests(pod, charge)
	limits := resourcehelper.PodLimits(pod, charge)
	out := &v1.Pod{ObjectMeta: informer.KeptMeta(&pod.ObjectMeta)}
	out.Spec.Containers = []v1.Container{{Name: usageContainer, Resources: v1.ResourceRequirements{
		Requests: lists.intern(requests),
		Limits:   lists.intern(limits),
	}}}
	out.Spec.ActiveDeadlineSeconds = pod.Spec.ActiveDeadlineSeconds
	out.Spec.PriorityClassName = pod.Spec.PriorityClassName
	if podCrossNamespaceAffinity(pod) {
		out.Spec.Affinity = crossNamespaceAffinity
	}
	out.Status.Phase = canonical(pod.Status.Phase, v1.PodPending, v1.PodRunning, v1.PodSucceeded, v1.PodFailed, v1.PodUnknown)
	out.Status.QOSClass = canonical(pod.Status.QOSClass, v1.PodQOSBestEffort, v1.PodQOSBurstable, v1.PodQOSGuaranteed)
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		out.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: st.ResourceClaimName}
	}
	return out
}

// canonical returns the constant among known equal to s, so that thousands of cached Pods
// share one string instead of each holding the copy it was decoded into.
func canonical[S ~string](s S, known ...S) S {
	for _, k := range known {
		if s == k {
			return k
		}
	}
	return s
}

// maxResourceLists bounds resourceLists: it remembers at most twice this many. Pods made from one
// template (a Deployment's) have the same totals, so a cluster has a few hundred distinct
// ones at most; the bound only keeps a cluster of all-different Pods from growing the table
// without end.
const maxResourceLists = 4096

// resourceLists shares one map among the cached Pods whose totals are equal, quantity by
// quantity and format by format: a small ResourceList costs about 700 bytes, most of a
// compact Pod. Cached objects are never written to, so sharing is safe.
type resourceLists struct {
	once   sync.Once
	shared *informer.Interner[v1.ResourceList]
}

// intern returns the shared list equal to l (nil for an empty one).
func (r *resourceLists) intern(l v1.ResourceList) v1.ResourceList {
	if len(l) == 0 {
		return nil
	}
	r.once.Do(func() { r.shared = informer.NewInterner[v1.ResourceList](maxResourceLists) })
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, string(name))
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		q := l[v1.ResourceName(name)]
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(q.String())
		b.WriteByte('/')
		b.WriteString(string(q.Format))
		b.WriteByte(';')
	}
	// The key is the canonical spelling; share only what is exactly equal.
	if shared := r.shared.Get(b.String(), l); sameTotals(shared, l) {
		return shared
	}
	return l
}

// sameTotals reports whether a and b hold the same names with equal values and formats (the
// format decides how a sum is written in a status).
func sameTotals(a, b v1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, qa := range a {
		qb, ok := b[name]
		if !ok || qa.Cmp(qb) != 0 || qa.Format != qb.Format {
			return false
		}
	}
	return true
}
