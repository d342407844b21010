package nodelifecycle

import (
	v1 "k8s.io/api/core/v1"
)

// ZoneState is a zone's health as upstream names it.
type ZoneState string

// Zone states, upstream's values.
const (
	// StateInitial is a zone seen for the first time, before its first evaluation.
	StateInitial ZoneState = "Initial"
	// StateNormal: tainting at --node-eviction-rate.
	StateNormal ZoneState = "Normal"
	// StatePartialDisruption: more than 2 Nodes and at least --unhealthy-zone-threshold of
	// them not Ready. Likely a network or infrastructure problem rather than dead machines,
	// so tainting slows down (large zones) or stops (small ones).
	StatePartialDisruption ZoneState = "PartialDisruption"
	// StateFullDisruption: no Ready Node at all. If some other zone is healthy the zone is
	// probably really gone and its Pods are better off elsewhere: normal rate.
	StateFullDisruption ZoneState = "FullDisruption"
)

// labelExcludeDisruption keeps a Node out of zone-state counting (upstream's label).
const labelExcludeDisruption = "node.kubernetes.io/exclude-disruption"

// zoneKey names the failure domain of node: region and zone, from the GA topology labels or
// the deprecated beta ones (which win, as upstream). Nodes with neither share the "" zone.
// Upstream joins the two with ":\x00:"; a NUL byte is unreadable in metrics and Events, so
// kcm-split joins with ":" alone. A region containing ":" could then collide with another;
// region names are DNS labels in practice.
func zoneKey(node *v1.Node) string {
	l := node.Labels
	zone, ok := l[v1.LabelFailureDomainBetaZone]
	if !ok {
		zone = l[v1.LabelTopologyZone]
	}
	region, ok := l[v1.LabelFailureDomainBetaRegion]
	if !ok {
		region = l[v1.LabelTopologyRegion]
	}
	if region == "" && zone == "" {
		return ""
	}
	return region + ":" + zone
}

// excludedFromDisruption reports whether node does not count towards its zone's state.
func excludedFromDisruption(node *v1.Node) bool {
	_, ok := node.Labels[labelExcludeDisruption]
	return ok
}

// zoneState computes a zone's state from how many of its Nodes are Ready and not (Ready
// False, Unknown, or no Ready condition at all).
func zoneState(ready, notReady int, unhealthyThreshold float64) ZoneState {
	switch {
	case ready == 0 && notReady > 0:
		return StateFullDisruption
	case notReady > 2 && float64(notReady)/float64(ready+notReady) >= unhealthyThreshold:
		return StatePartialDisruption
	default:
		return StateNormal
	}
}

// zoneRate is the NoExecute tainting rate, Nodes per second, for a zone of size Nodes in
// state (StateInitial: not evaluated yet, normal rate).
func (o Options) zoneRate(state ZoneState, size int) float64 {
	if state == StatePartialDisruption {
		if size > o.LargeClusterThreshold {
			return o.SecondaryEvictionRate
		}
		return 0
	}
	return o.EvictionRate
}
