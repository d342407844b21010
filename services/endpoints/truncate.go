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
// cut is shared among subsets by apportion: every port set keeps at least one backend when
// the budget allows (upstream's rounding can leave one with none), the rest in proportion to
// size. The result is repacked, so subsets emptied by the cut are gone (the API server
// rejects them) and the output is canonical again.
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
	budget := limit - ready
	if cutReady {
		budget = limit
	}
	sizes := make([]int, len(subsets))
	for i := range subsets {
		if cutReady {
			sizes[i] = len(subsets[i].Addresses)
		} else {
			sizes[i] = len(subsets[i].NotReadyAddresses)
		}
	}
	shares := apportion(sizes, budget)
	out := make([]v1.EndpointSubset, len(subsets))
	for i := range subsets {
		s := subsets[i]
		if cutReady {
			s.Addresses = s.Addresses[:shares[i]]
			s.NotReadyAddresses = nil
		} else {
			s.NotReadyAddresses = s.NotReadyAddresses[:shares[i]]
		}
		out[i] = s
	}
	return repackSubsets(out), true
}

// apportion splits budget among parts of the given sizes: each share is at most its size and
// the shares add up to min(budget, total). When the budget covers one per non-empty part,
// every such part gets one first; what is left goes in proportion to the remaining sizes
// (rounded down), and the last few units one at a time in order. Deterministic, so the same
// input always gives the same object (no write on resync).
func apportion(sizes []int, budget int) []int {
	shares := make([]int, len(sizes))
	total, nonEmpty := 0, 0
	for _, n := range sizes {
		total += n
		if n > 0 {
			nonEmpty++
		}
	}
	if budget >= total {
		copy(shares, sizes)
		return shares
	}
	if budget <= 0 {
		return shares
	}
	rest := make([]int, len(sizes))
	copy(rest, sizes)
	if budget >= nonEmpty {
		for i, n := range sizes {
			if n > 0 {
				shares[i], rest[i] = 1, n-1
			}
		}
		budget -= nonEmpty
		total -= nonEmpty
	}
	left := budget
	for i, n := range rest {
		extra := n * budget / total
		shares[i] += extra
		left -= extra
	}
	for i := 0; left > 0; i = (i + 1) % len(sizes) {
		if shares[i] < sizes[i] {
			shares[i]++
			left--
		}
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
