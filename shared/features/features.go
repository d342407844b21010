// Package features is --feature-gates for every binary. It knows kube-controller-manager
// v1.36's gates with their defaults, stages and locks, so the flag of a kube-controller-manager
// manifest carries over and means the same, and parses it with component-base's featuregate,
// upstream's own parser: an unknown gate, or a locked gate set against its lock, is an error.
// Each controller names the gates that change what it does (Spec.FeatureGates); any other
// known gate is accepted and has no effect on it.
package features

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
)

// The gates that change what a kcm-split controller does, upstream's names.
const (
	// PodLevelResources (quota): a Pod's spec.resources, when set, is what it is charged.
	PodLevelResources featuregate.Feature = "PodLevelResources"
	// InPlacePodVerticalScaling (quota): a resized Pod is charged the larger of what it asks
	// and what its containers were given. Locked on in v1.36.
	InPlacePodVerticalScaling featuregate.Feature = "InPlacePodVerticalScaling"
	// DynamicResourceAllocation (quota): ResourceClaims are charged their devices. Locked
	// on in v1.36.
	DynamicResourceAllocation featuregate.Feature = "DynamicResourceAllocation"
	// DRAExtendedResource (quota): a ResourceClaim is also charged the extended resources
	// its devices provide.
	DRAExtendedResource featuregate.Feature = "DRAExtendedResource"
	// SeparateTaintEvictionController (nodelifecycle): NoExecute evictions are the
	// taint-eviction controller's (--enable-taint-eviction). Locked on in v1.36.
	SeparateTaintEvictionController featuregate.Feature = "SeparateTaintEvictionController"
	// OrderedNamespaceDeletion (namespace): a namespace's Pods go before its other content.
	// Locked on in v1.36.
	OrderedNamespaceDeletion featuregate.Feature = "OrderedNamespaceDeletion"
	// VolumeAttributesClass (pvbinder): a claim binds only a volume of its attributes class.
	// Locked on in v1.36.
	VolumeAttributesClass featuregate.Feature = "VolumeAttributesClass"
	// PreferSameTrafficDistribution (endpoints, EndpointSlices): trafficDistribution
	// PreferSameZone and PreferSameNode give endpoints hints. Locked on in v1.36.
	PreferSameTrafficDistribution featuregate.Feature = "PreferSameTrafficDistribution"
)

// Version is the Kubernetes version whose gates these are.
var Version = version.MajorMinor(1, 36)

// New returns a gate that knows every gate of kube-controller-manager v1.36, at its default.
func New() featuregate.MutableVersionedFeatureGate {
	fg := featuregate.NewVersionedFeatureGate(Version)
	specs := make(map[featuregate.Feature]featuregate.VersionedSpecs, len(kubeControllerManager))
	for name, spec := range kubeControllerManager {
		// The table holds each gate's state at Version alone: stated as in force since 1.0,
		// the one version the parser accepts for any stage (it wants a deprecated gate's
		// history to start there), so at Version it is exactly the table's.
		spec.Version = version.MajorMinor(1, 0)
		specs[name] = featuregate.VersionedSpecs{spec}
	}
	if err := fg.AddVersioned(specs); err != nil {
		panic(fmt.Sprintf("features: the generated gates do not load: %v", err)) // a bad generation
	}
	return fg
}

// Known reports whether kube-controller-manager v1.36 has a gate of that name.
func Known(name featuregate.Feature) bool {
	_, ok := kubeControllerManager[name]
	return ok
}

// Parse sets the gates given as --feature-gates values ("A=true,B=false", any number of
// them; later values win) on a new gate. The error names every gate it refuses.
func Parse(values []string) (featuregate.MutableVersionedFeatureGate, error) {
	var unknown []string
	for _, name := range Named(values) {
		if !Known(featuregate.Feature(name)) && name != "AllAlpha" && name != "AllBeta" {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unrecognized feature gates: %s (kube-controller-manager %s has none of that name)", strings.Join(unknown, ", "), Version)
	}
	fg := New()
	if s := strings.Join(values, ","); strings.TrimSpace(s) != "" {
		if err := fg.Set(s); err != nil {
			return nil, err
		}
	}
	return fg, nil
}

// Named returns the names of the gates set in values, sorted, each once.
func Named(values []string) []string {
	seen := map[string]bool{}
	for _, v := range values {
		for _, pair := range strings.Split(v, ",") {
			if name, _, _ := strings.Cut(pair, "="); strings.TrimSpace(name) != "" {
				seen[strings.TrimSpace(name)] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
