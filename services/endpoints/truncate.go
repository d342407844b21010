package endpoints

import (
	v1 "k8s.io/api/core/v1"
)

const (
	// maxAddresses caps the addresses (ready plus not ready, counted per subset) of one
	// Endpoints object, as upstream does: beyond it the object grows too large to watch
	// efficiently, and consumers are expected to use EndpointSlices.
	maxAddresses = 1000
	// overCapacityTruncated is the value of the over-capacity annotation on a truncated
	// Endpoints object.
	overCapacityTruncated = "truncated"
)

// truncateSubsets keeps at most limit addresses of canonical subsets and reports whether it
// dropped any. Ready addresses are kept before not-ready ones. The budget of the kind being
// cut is shared among subsets in proportion to their size, rounded up, so that every port
// set keeps some backends; the rounding makes the last subsets give way. The result is
// repacked, so subsets emptied by the cut are gone (the API server rejects them) and the
// output is canonical again.
func truncateSubsets(subsets []v1.EndpointSubset, limit int) ([]v1.EndpointSubset, bool) {
	ready, notReady := 0, 0
	for i := range subsets {
		ready += len(subsets[i].Addresses)
		notReady += len(subsets[i].NotReadyAddresses)
	}
	if ready+notReady <= limit {
		return subsets, false
	}

	// Either the ready addresses alone exceed the limit, and only some of them are kept, or
	// they all fit and the not-ready ones share what is left.
	cutReady := ready > limit
	budget, pool := limit-ready, notReady
	if cutReady {
		budget, pool = limit, ready
	}
	left := budget
	out := make([]v1.EndpointSubset, len(subsets))
	for i := range subsets {
		s := subsets[i]
		cut := &s.NotReadyAddresses
		if cutReady {
			cut = &s.Addresses
			s.NotReadyAddresses = nil
		}
		share := min(ceilDiv(len(*cut)*budget, pool), left)
		if share < len(*cut) {
			*cut = (*cut)[:share]
		}
		left -= len(*cut)
		out[i] = s
	}
	return repackSubsets(out), true
}

// ceilDiv is a/b rounded up, for non-negative a and positive b.
func ceilDiv(a, b int) int {
	return (a + b - 1) / b
}

// addressCount counts addresses as the capacity limit does.
func addressCount(subsets []v1.EndpointSubset) int {
	n := 0
	for i := range subsets {
		n += len(subsets[i].Addresses) + len(subsets[i].NotReadyAddresses)
	}
	return n
}
