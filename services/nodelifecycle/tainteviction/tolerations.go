package tainteviction

import (
	"math"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

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
