package quota

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func rl(kv ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// checkUsage compares only the names in want, and that names absent from want with an
// explicit "-" are absent.
func checkUsage(t *testing.T, got v1.ResourceList, want map[string]string) {
	t.Helper()
	for name, w := range want {
		g, ok := got[v1.ResourceName(name)]
		if w == "-" {
			if ok {
				t.Errorf("%s = %s, want absent", name, g.String())
			}
			continue
		}
		if !ok {
			t.Errorf("%s absent, want %s", name, w)
			continue
		}
		if g.Cmp(resource.MustParse(w)) != 0 {
			t.Errorf("%s = %s, want %s", name, g.String(), w)
		}
	}
}

func TestCalculateScopesAndMerge(t *testing.T) {
	now := time.Now()
	pods := []any{
		pod(containers(container("a", rl("cpu", "1"), nil))),
		pod(containers(container("a", rl("cpu", "2"), nil)), func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = new(int64(5)) }),
		pod(containers(container("a", nil, nil))),
		pod(containers(container("a", rl("cpu", "4"), nil)), phase(v1.PodFailed)),
	}
	names := []v1.ResourceName{"pods", "requests.cpu", "count/pods"}
	ev := evaluatorFor(podsResource, DefaultOptions().PodResources, claimEvaluator{})
	used, _ := calculate(ev, pods, names, nil, now)
	checkUsage(t, used, map[string]string{"pods": "3", "requests.cpu": "3", "count/pods": "4"})

	spec := v1.ResourceQuotaSpec{
		Scopes: []v1.ResourceQuotaScope{v1.ResourceQuotaScopeNotTerminating},
		ScopeSelector: &v1.ScopeSelector{MatchExpressions: []v1.ScopedResourceSelectorRequirement{
			{ScopeName: v1.ResourceQuotaScopeNotBestEffort, Operator: v1.ScopeSelectorOpExists},
		}},
	}
	used, _ = calculate(ev, pods, names, scopeRequirements(&spec), now)
	checkUsage(t, used, map[string]string{"pods": "1", "requests.cpu": "1", "count/pods": "2"})

	// A type without scopes counts nothing under a scoped quota.
	used, _ = calculate(evaluatorFor(schema.GroupResource{Resource: "configmaps"}, DefaultOptions().PodResources, claimEvaluator{}), []any{&metav1.PartialObjectMetadata{}}, []v1.ResourceName{"configmaps"}, scopeRequirements(&spec), now)
	checkUsage(t, used, map[string]string{"configmaps": "0"})
	used, _ = calculate(evaluatorFor(schema.GroupResource{Resource: "configmaps"}, DefaultOptions().PodResources, claimEvaluator{}), []any{&metav1.PartialObjectMetadata{}, &metav1.PartialObjectMetadata{}}, []v1.ResourceName{"configmaps", "count/configmaps"}, nil, now)
	checkUsage(t, used, map[string]string{"configmaps": "2", "count/configmaps": "2"})

	rq := &v1.ResourceQuota{
		Spec: v1.ResourceQuotaSpec{Hard: rl("pods", "10", "count/widgets.example.com", "5")},
		Status: v1.ResourceQuotaStatus{
			Hard: rl("pods", "10", "count/widgets.example.com", "5", "secrets", "1"),
			Used: rl("pods", "7", "count/widgets.example.com", "3", "secrets", "1"),
		},
	}
	st := desiredStatus(rq, rl("pods", "2"))
	checkUsage(t, st.Used, map[string]string{"pods": "2", "count/widgets.example.com": "3", "secrets": "-"})
	if !statusChanged(rq, st) {
		t.Fatal("changed status not seen as changed")
	}
	rq.Status = v1.ResourceQuotaStatus{Hard: rl("pods", "10", "count/widgets.example.com", "5"), Used: rl("pods", "2", "count/widgets.example.com", "3")}
	if statusChanged(rq, desiredStatus(rq, rl("pods", "2000m"))) {
		t.Fatal("the same quantity in other units seen as a change")
	}
}

func TestNeedsPriority(t *testing.T) {
	rq := func(hard, shard, used v1.ResourceList) *v1.ResourceQuota {
		return &v1.ResourceQuota{Spec: v1.ResourceQuotaSpec{Hard: hard}, Status: v1.ResourceQuotaStatus{Hard: shard, Used: used}}
	}
	if !needsPriority(rq(rl("pods", "1"), nil, nil), DefaultOptions().Claims) {
		t.Error("new quota")
	}
	if !needsPriority(rq(rl("pods", "2"), rl("pods", "1"), rl("pods", "0")), DefaultOptions().Claims) {
		t.Error("hard changed")
	}
	if !needsPriority(rq(rl("pods", "1", "secrets", "1"), rl("pods", "1", "secrets", "1"), rl("pods", "0")), DefaultOptions().Claims) {
		t.Error("used missing")
	}
	if needsPriority(rq(rl("pods", "1", "example.com/x", "1"), rl("pods", "1", "example.com/x", "1"), rl("pods", "0")), DefaultOptions().Claims) {
		t.Error("a name nobody measures cannot need priority")
	}
	if needsPriority(rq(rl("pods", "1"), rl("pods", "1"), rl("pods", "0")), DefaultOptions().Claims) {
		t.Error("synced quota")
	}
}
