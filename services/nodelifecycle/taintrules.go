package nodelifecycle

import (
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The NoExecute taints this controller puts on Nodes that are not Ready, through the zones'
// rate limiters. They mirror the Ready condition, so a Node has at most one of them.
var (
	unreachableTaint = v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}
	notReadyTaint    = v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoExecute}
)

// noScheduleTaintKeys are the NoSchedule taints derived from a Node's conditions and
// spec.unschedulable: this controller owns these keys with this effect and nothing else.
var noScheduleTaintKeys = map[string]bool{
	v1.TaintNodeNotReady:           true,
	v1.TaintNodeUnreachable:        true,
	v1.TaintNodeMemoryPressure:     true,
	v1.TaintNodeDiskPressure:       true,
	v1.TaintNodePIDPressure:        true,
	v1.TaintNodeNetworkUnavailable: true,
	v1.TaintNodeUnschedulable:      true,
}

// conditionTaintKey maps a Node condition in a given status to the taint key it implies, ""
// for none.
func conditionTaintKey(c v1.NodeCondition) string {
	switch c.Type {
	case v1.NodeReady:
		switch c.Status {
		case v1.ConditionFalse:
			return v1.TaintNodeNotReady
		case v1.ConditionUnknown:
			return v1.TaintNodeUnreachable
		}
	case v1.NodeMemoryPressure:
		if c.Status == v1.ConditionTrue {
			return v1.TaintNodeMemoryPressure
		}
	case v1.NodeDiskPressure:
		if c.Status == v1.ConditionTrue {
			return v1.TaintNodeDiskPressure
		}
	case v1.NodePIDPressure:
		if c.Status == v1.ConditionTrue {
			return v1.TaintNodePIDPressure
		}
	case v1.NodeNetworkUnavailable:
		if c.Status == v1.ConditionTrue {
			return v1.TaintNodeNetworkUnavailable
		}
	}
	return ""
}

// desiredNoScheduleKeys returns the keys of the NoSchedule taints node should carry.
func desiredNoScheduleKeys(node *v1.Node) map[string]bool {
	want := map[string]bool{}
	for _, c := range node.Status.Conditions {
		if k := conditionTaintKey(c); k != "" {
			want[k] = true
		}
	}
	if node.Spec.Unschedulable {
		want[v1.TaintNodeUnschedulable] = true
	}
	return want
}

// withNoScheduleTaints returns node's taints with the condition NoSchedule taints brought in
// line with its conditions, and whether anything changed. Taints of other keys or effects,
// and the position of those kept, are left as they are. Added taints carry now as TimeAdded,
// as upstream stamps every taint it adds: tools reading how long a Node has been unreachable
// or not ready look at it. Kept taints keep theirs (or none, like the admission's).
// holdReady leaves the NoSchedule taints of the Ready condition (not-ready, unreachable) as
// they are, for a Node the partition guard holds.
func withNoScheduleTaints(node *v1.Node, now time.Time, holdReady bool) ([]v1.Taint, bool) {
	want := desiredNoScheduleKeys(node)
	if holdReady {
		delete(want, v1.TaintNodeNotReady)
		delete(want, v1.TaintNodeUnreachable)
	}
	out := make([]v1.Taint, 0, len(node.Spec.Taints)+len(want))
	changed := false
	for _, t := range node.Spec.Taints {
		held := holdReady && (t.Key == v1.TaintNodeNotReady || t.Key == v1.TaintNodeUnreachable)
		if !held && t.Effect == v1.TaintEffectNoSchedule && noScheduleTaintKeys[t.Key] {
			if !want[t.Key] {
				changed = true
				continue
			}
			delete(want, t.Key) // present already
		}
		out = append(out, t)
	}
	// Added in a fixed order, so that equal inputs give equal patches.
	at := metav1.NewTime(now)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		out = append(out, v1.Taint{Key: k, Effect: v1.TaintEffectNoSchedule, TimeAdded: &at})
		changed = true
	}
	return out, changed
}

// swapTaints returns taints with every taint matching one of remove (key and effect)
// dropped and add appended unless present, and whether anything changed. Added taints carry
// now as TimeAdded, whatever their effect (upstream stamps every taint it adds).
func swapTaints(taints []v1.Taint, add *v1.Taint, remove []v1.Taint, now time.Time) ([]v1.Taint, bool) {
	out := make([]v1.Taint, 0, len(taints)+1)
	changed, present := false, false
	for _, t := range taints {
		if matchesAny(t, remove) {
			changed = true
			continue
		}
		if add != nil && t.MatchTaint(add) {
			present = true
		}
		out = append(out, t)
	}
	if add != nil && !present {
		t := *add
		at := metav1.NewTime(now)
		t.TimeAdded = &at
		out = append(out, t)
		changed = true
	}
	return out, changed
}

func matchesAny(t v1.Taint, set []v1.Taint) bool {
	for i := range set {
		if t.MatchTaint(&set[i]) {
			return true
		}
	}
	return false
}

// hasTaint reports whether taints holds one with t's key and effect.
func hasTaint(taints []v1.Taint, t v1.Taint) bool { return matchesAny(t, taints) }
