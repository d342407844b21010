package nodelifecycle

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/node/topology"
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

// zoneKey names the failure domain of node as upstream does, with k8s.io/component-helpers:
// region and zone from the deprecated beta topology labels or else the GA ones, joined by
// ":\x00:", so the zone label of node_collector_* metrics matches upstream's dashboards and
// queries. Nodes with neither share the "" zone.
func zoneKey(node *v1.Node) string { return topology.GetZoneKey(node) }

// zoneName is a zone key for people (Events, logs): region:zone without the NUL byte, or a
// note for Nodes without zone labels.
func zoneName(key string) string {
	if key == "" {
		return "(no zone labels)"
	}
	return strings.Replace(key, ":\x00:", ":", 1)
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
// state (StateInitial: not evaluated yet, normal rate). A fully disrupted zone gets
// --zone-full-disruption-eviction-rate when set; the all-zones-down mode (rate 0) is decided
// elsewhere.
func (o Options) zoneRate(state ZoneState, size int) float64 {
	switch state {
	case StatePartialDisruption:
		if size > o.LargeClusterThreshold {
			return o.SecondaryEvictionRate
		}
		return 0
	case StateFullDisruption:
		if o.ZoneFullDisruptionEvictionRate != RateUnset {
			return o.ZoneFullDisruptionEvictionRate
		}
	}
	return o.EvictionRate
}
