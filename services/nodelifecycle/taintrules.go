package nodelifecycle

import (
	"math"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
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
// and the position of those kept, are left as they are.
func withNoScheduleTaints(node *v1.Node) ([]v1.Taint, bool) {
	want := desiredNoScheduleKeys(node)
	out := make([]v1.Taint, 0, len(node.Spec.Taints)+len(want))
	changed := false
	for _, t := range node.Spec.Taints {
		if t.Effect == v1.TaintEffectNoSchedule && noScheduleTaintKeys[t.Key] {
			if !want[t.Key] {
				changed = true
				continue
			}
			delete(want, t.Key) // present already
		}
		out = append(out, t)
	}
	// Added in a fixed order, so that equal inputs give equal patches.
	for _, k := range sortedKeys(want) {
		out = append(out, v1.Taint{Key: k, Effect: v1.TaintEffectNoSchedule})
		changed = true
	}
	return out, changed
}

// swapTaints returns taints with every taint matching one of remove (key and effect)
// dropped and add appended unless present, and whether anything changed. Added taints carry
// now as TimeAdded.
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
		if t.Effect == v1.TaintEffectNoExecute {
			at := metavOf(now)
			t.TimeAdded = &at
		}
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

// noExecuteTaints returns the NoExecute taints of node.
func noExecuteTaints(node *v1.Node) []v1.Taint {
	var out []v1.Taint
	for _, t := range node.Spec.Taints {
		if t.Effect == v1.TaintEffectNoExecute {
			out = append(out, t)
		}
	}
	return out
}

// tolerationDeadline decides the fate of a Pod with tolerations on a Node with the NoExecute
// taints given: evict at once (tolerated false), never (forever true), or after the
// returned duration. Each taint is matched by the first toleration that tolerates it, and
// the smallest tolerationSeconds among those matched wins; zero or negative seconds mean at
// once, as upstream.
func tolerationDeadline(taints []v1.Taint, tolerations []v1.Toleration) (tolerated, forever bool, after time.Duration) {
	if len(taints) == 0 {
		return true, true, 0
	}
	minSeconds := int64(math.MaxInt64)
	for i := range taints {
		var match *v1.Toleration
		for j := range tolerations {
			// Comparison operators are an alpha feature, off by default in v1.36.
			if tolerations[j].ToleratesTaint(klog.Background(), &taints[i], false) {
				match = &tolerations[j]
				break
			}
		}
		if match == nil {
			return false, false, 0
		}
		if match.TolerationSeconds != nil && *match.TolerationSeconds < minSeconds {
			minSeconds = *match.TolerationSeconds
		}
	}
	switch {
	case minSeconds == math.MaxInt64:
		return true, true, 0
	case minSeconds <= 0:
		return true, false, 0
	default:
		return true, false, time.Duration(minSeconds) * time.Second
	}
}
