package quota

import (
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	resourcehelper "k8s.io/component-helpers/resource"
)

// evaluator measures the objects of one resource type.
type evaluator struct {
	// usage is the usage of one object and, when it changes with time alone, after how long.
	usage func(obj any, now time.Time) (v1.ResourceList, time.Duration)
	// scope reports whether the object is in one scope requirement; nil: the type has no
	// scopes, so a scoped quota never counts it.
	scope func(sel v1.ScopedResourceSelectorRequirement, obj any) bool
}

// evaluatorFor returns the evaluator of gr: Pods, Services, volume claims and resource claims
// have their own, every other type is an object count. claims charges ResourceClaims.
func evaluatorFor(gr schema.GroupResource, charge resourcehelper.PodResourcesOptions, claims claimEvaluator) evaluator {
	switch gr {
	case claimsResource:
		// No scopes: a scoped quota never counts claims, as upstream.
		return evaluator{
			usage: func(obj any, now time.Time) (v1.ResourceList, time.Duration) {
				return claims.usage(obj.(*resourceapi.ResourceClaim), now), 0
			},
		}
	case podsResource:
		return evaluator{
			usage: func(obj any, now time.Time) (v1.ResourceList, time.Duration) {
				return podUsage(obj.(*v1.Pod), now, charge)
			},
			scope: func(sel v1.ScopedResourceSelectorRequirement, obj any) bool {
				return podMatchesScope(sel, obj.(*v1.Pod))
			},
		}
	case servicesResource:
		return evaluator{
			usage: func(obj any, _ time.Time) (v1.ResourceList, time.Duration) { return serviceUsage(obj.(*v1.Service)), 0 },
		}
	case pvcsResource:
		return evaluator{
			usage: func(obj any, _ time.Time) (v1.ResourceList, time.Duration) {
				return pvcUsage(obj.(*v1.PersistentVolumeClaim)), 0
			},
			scope: func(sel v1.ScopedResourceSelectorRequirement, obj any) bool {
				return pvcMatchesScope(sel, obj.(*v1.PersistentVolumeClaim))
			},
		}
	}
	one := v1.ResourceList{countName(gr): *resource.NewQuantity(1, resource.DecimalSI)}
	for alias, g := range legacyCounts {
		if g == gr {
			one[alias] = *resource.NewQuantity(1, resource.DecimalSI)
		}
	}
	return evaluator{usage: func(any, time.Time) (v1.ResourceList, time.Duration) { return one, 0 }}
}

// scopeRequirements turns a quota's scopes and scope selector into one list of requirements,
// all of which an object must meet.
func scopeRequirements(spec *v1.ResourceQuotaSpec) []v1.ScopedResourceSelectorRequirement {
	var out []v1.ScopedResourceSelectorRequirement
	for _, s := range spec.Scopes {
		out = append(out, v1.ScopedResourceSelectorRequirement{ScopeName: s, Operator: v1.ScopeSelectorOpExists})
	}
	if spec.ScopeSelector != nil {
		out = append(out, spec.ScopeSelector.MatchExpressions...)
	}
	return out
}

// calculate sums the usage of objs for names, counting only the objects in every scope
// requirement. Every name gets a value, zero when nothing matches. recheck is the soonest
// time after which the sum changes with time alone (0: never).
func calculate(ev evaluator, objs []any, names []v1.ResourceName, scopes []v1.ScopedResourceSelectorRequirement, now time.Time) (used v1.ResourceList, recheck time.Duration) {
	used = make(v1.ResourceList, len(names))
	for _, n := range names {
		used[n] = resource.Quantity{Format: resource.DecimalSI}
	}
	for _, obj := range objs {
		if !inScopes(ev, scopes, obj) {
			continue
		}
		u, after := ev.usage(obj, now)
		if after > 0 && (recheck == 0 || after < recheck) {
			recheck = after
		}
		for _, n := range names {
			if q, ok := u[n]; ok {
				sum := used[n]
				sum.Add(q)
				used[n] = sum
			}
		}
	}
	return used, recheck
}

func inScopes(ev evaluator, scopes []v1.ScopedResourceSelectorRequirement, obj any) bool {
	for _, s := range scopes {
		if ev.scope == nil || !ev.scope(s, obj) {
			return false
		}
	}
	return true
}

// desiredStatus merges freshly measured usage into the quota's current status: hard is the
// spec's, used keeps the last value of every name that could not be measured this time and
// drops names no longer in hard.
func desiredStatus(rq *v1.ResourceQuota, fresh v1.ResourceList) v1.ResourceQuotaStatus {
	hard := make(v1.ResourceList, len(rq.Spec.Hard))
	used := v1.ResourceList{}
	for name, q := range rq.Spec.Hard {
		hard[name] = q.DeepCopy()
		if f, ok := fresh[name]; ok {
			used[name] = f.DeepCopy()
		} else if old, ok := rq.Status.Used[name]; ok {
			used[name] = old.DeepCopy()
		}
	}
	return v1.ResourceQuotaStatus{Hard: hard, Used: used}
}

// statusChanged reports whether status differs from the quota's current one. Quantities are
// compared by value: "1Gi" and "1073741824" are the same and rewriting one as the other would
// be a write on every resync.
func statusChanged(rq *v1.ResourceQuota, status v1.ResourceQuotaStatus) bool {
	if rq.Status.Hard == nil || rq.Status.Used == nil {
		return true
	}
	return !apiequality.Semantic.DeepEqual(rq.Spec.Hard, rq.Status.Hard) || !equalUsage(status.Used, rq.Status.Used)
}

// equalUsage reports whether two lists hold the same names with equal quantities.
func equalUsage(a, b v1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, qa := range a {
		qb, ok := b[name]
		if !ok || qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}

// needsPriority reports whether admission is blocked on this quota until it is synced: its
// status lacks the spec's limits, or usage of a name the controller measures.
func needsPriority(rq *v1.ResourceQuota, o ClaimOptions) bool {
	if !apiequality.Semantic.DeepEqual(rq.Spec.Hard, rq.Status.Hard) {
		return true
	}
	for name := range rq.Status.Hard {
		if _, ok := rq.Status.Used[name]; ok {
			continue
		}
		if _, measured := resourceFor(name, o); measured {
			return true
		}
	}
	return false
}
