package endpoints

import (
	"math"

	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/subsets"
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

// truncateSubsets keeps at most limit addresses of the canonical subsets in and reports whether it
// dropped any. Ready addresses are kept before not-ready ones, and the budget of the kind
// being cut is shared among subsets by apportion, upstream's rule, so an Endpoints object
// over capacity keeps the same addresses under kcm-split and kube-controller-manager (a
// cluster switching between them rewrites nothing). The result is repacked: a subset the cut
// emptied is dropped, where upstream would send it and have the write refused (the API
// server rejects a subset without addresses).
func truncateSubsets(in []v1.EndpointSubset, limit int) ([]v1.EndpointSubset, bool) {
	ready, notReady := 0, 0
	for i := range in {
		ready += len(in[i].Addresses)
		notReady += len(in[i].NotReadyAddresses)
	}
	if ready+notReady <= limit {
		return in, false
	}

	// Either the ready addresses alone exceed the limit, and only some of them are kept, or
	// they all fit and the not-ready ones share what is left.
	cutReady := ready > limit
	budget := limit - ready
	if cutReady {
		budget = limit
	}
	sizes := make([]int, len(in))
	for i := range in {
		if cutReady {
			sizes[i] = len(in[i].Addresses)
		} else {
			sizes[i] = len(in[i].NotReadyAddresses)
		}
	}
	shares := apportion(sizes, budget)
	out := make([]v1.EndpointSubset, len(in))
	for i := range in {
		s := in[i]
		if cutReady {
			s.Addresses = s.Addresses[:shares[i]]
			s.NotReadyAddresses = nil
		} else {
			s.NotReadyAddresses = s.NotReadyAddresses[:shares[i]]
		}
		out[i] = s
	}
	return subsets.Repack(out), true
}

// apportion splits budget among parts of the given sizes as upstream's endpoints controller
// does: in order, each part gets its proportion of the budget rounded up (the same float
// arithmetic, so the same numbers), capped by what is left; a small last part can get
// nothing. The shares never exceed the sizes and add up to min(budget, total).
func apportion(sizes []int, budget int) []int {
	shares := make([]int, len(sizes))
	total := 0
	for _, n := range sizes {
		total += n
	}
	if budget >= total {
		copy(shares, sizes)
		return shares
	}
	left := budget
	for i, n := range sizes {
		share := int(math.Ceil(float64(n) / float64(total) * float64(budget)))
		shares[i] = min(share, left, n)
		left -= shares[i]
	}
	return shares
}

// addressCount counts addresses as the capacity limit does.
func addressCount(subsets []v1.EndpointSubset) int {
	n := 0
	for i := range subsets {
		n += len(subsets[i].Addresses) + len(subsets[i].NotReadyAddresses)
	}
	return n
}
