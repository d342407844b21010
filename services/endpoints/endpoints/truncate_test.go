package endpoints

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/subsets"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
)

// block describes one subset by its port and how many ready and not-ready Pods it has.
type block struct {
	Port            int32
	Ready, NotReady int
}

// subsetsOf builds canonical subsets with distinct Pods per block.
func subsetsOf(blocks ...block) []v1.EndpointSubset {
	var raw []v1.EndpointSubset
	n := 0
	for _, b := range blocks {
		s := v1.EndpointSubset{Ports: []v1.EndpointPort{testobj.Port(fmt.Sprint(b.Port), b.Port)}}
		for range b.Ready {
			n++
			s.Addresses = append(s.Addresses, testobj.Address(fmt.Sprintf("p%d", n), fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)))
		}
		for range b.NotReady {
			n++
			s.NotReadyAddresses = append(s.NotReadyAddresses, testobj.Address(fmt.Sprintf("p%d", n), fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)))
		}
		raw = append(raw, s)
	}
	return subsets.Repack(raw)
}

// blocksOf summarises subsets back into blocks, keyed by their single port.
func blocksOf(subsets []v1.EndpointSubset) []block {
	var out []block
	for _, s := range subsets {
		out = append(out, block{Port: s.Ports[0].Port, Ready: len(s.Addresses), NotReady: len(s.NotReadyAddresses)})
	}
	return out
}

func TestTruncateSubsets(t *testing.T) {
	for _, tc := range []struct {
		name          string
		limit         int
		in            []block
		want          []block
		wantTruncated bool
	}{
		{name: "empty", limit: 10, in: nil, want: nil},
		{name: "under the limit", limit: 10, in: []block{{80, 5, 4}}, want: []block{{80, 5, 4}}},
		{name: "at the limit", limit: 10, in: []block{{80, 6, 4}}, want: []block{{80, 6, 4}}},
		{name: "not ready cut first", limit: 10, in: []block{{80, 7, 5}}, want: []block{{80, 7, 3}}, wantTruncated: true},
		{name: "ready exactly at the limit: all not ready go", limit: 10, in: []block{{80, 10, 3}}, want: []block{{80, 10, 0}}, wantTruncated: true},
		{name: "ready over the limit: ready shared, not ready dropped", limit: 10, in: []block{{80, 6, 2}, {81, 6, 0}}, want: []block{{80, 5, 0}, {81, 5, 0}}, wantTruncated: true},
		{name: "not ready shared in proportion", limit: 8, in: []block{{80, 4, 6}, {81, 0, 2}}, want: []block{{80, 4, 3}, {81, 0, 1}}, wantTruncated: true},
		{
			// Upstream's rounding: ceil(6/13*10) = 5 twice, nothing left for port 82. The
			// same addresses as kube-controller-manager keeps; its emptied subset is dropped.
			name: "upstream's rounding up, in order", limit: 10,
			in:   []block{{80, 6, 0}, {81, 6, 0}, {82, 1, 0}},
			want: []block{{80, 5, 0}, {81, 5, 0}}, wantTruncated: true,
		},
		{
			// ceil(3/7*4) = 2, ceil(2/7*4) = 2, then nothing is left for the third.
			name: "rounding up favours the first subsets", limit: 4,
			in:   []block{{80, 3, 0}, {81, 2, 0}, {82, 2, 0}},
			want: []block{{80, 2, 0}, {81, 2, 0}}, wantTruncated: true,
		},
		{name: "a not-ready-only subset vanishes when ready is cut", limit: 10, in: []block{{80, 11, 0}, {81, 0, 3}}, want: []block{{80, 10, 0}}, wantTruncated: true},
		{name: "upstream's limit", limit: maxAddresses, in: []block{{80, maxAddresses - 3, 4}}, want: []block{{80, maxAddresses - 3, 3}}, wantTruncated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, truncated := truncateSubsets(subsetsOf(tc.in...), tc.limit)
			if truncated != tc.wantTruncated {
				t.Errorf("truncated = %v, want %v", truncated, tc.wantTruncated)
			}
			if diff := cmp.Diff(tc.want, blocksOf(got)); diff != "" {
				t.Errorf("subsets (-want +got):\n%s", diff)
			}
			if n := addressCount(got); n > tc.limit {
				t.Errorf("%d addresses kept, limit %d", n, tc.limit)
			}
			for i, s := range got {
				if len(s.Addresses)+len(s.NotReadyAddresses) == 0 {
					t.Errorf("subset %d is empty", i)
				}
			}
			// Computing again from the same input must give the same object, or a sync would
			// never find it up to date (a write on every resync).
			again, _ := truncateSubsets(subsetsOf(tc.in...), tc.limit)
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("truncating the same input twice differs (-first +second):\n%s", diff)
			}
		})
	}
}

func TestTruncateSubsetsKeepsTheFirstAddresses(t *testing.T) {
	in := subsetsOf(block{80, 5, 0})
	got, _ := truncateSubsets(in, 3)
	if diff := cmp.Diff(in[0].Addresses[:3], got[0].Addresses); diff != "" {
		t.Errorf("kept addresses (-want +got):\n%s", diff)
	}
}

// TestApportionProperties checks apportion on many random inputs: shares never exceed sizes,
// add up to min(budget, total), and are deterministic.
func TestApportionProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		sizes := make([]int, 1+rng.IntN(6))
		total := 0
		for i := range sizes {
			if rng.IntN(4) > 0 {
				sizes[i] = rng.IntN(700)
			}
			total += sizes[i]
		}
		budget := rng.IntN(total + 10)
		shares := apportion(sizes, budget)
		sum := 0
		for i := range shares {
			if shares[i] < 0 || shares[i] > sizes[i] {
				t.Fatalf("apportion(%v, %d) = %v: share out of range", sizes, budget, shares)
			}
			sum += shares[i]
		}
		if sum != min(budget, total) {
			t.Fatalf("apportion(%v, %d) = %v: sum %d, want %d", sizes, budget, shares, sum, min(budget, total))
		}
		if again := apportion(sizes, budget); !slices.Equal(again, shares) {
			t.Fatalf("apportion(%v, %d) not deterministic: %v then %v", sizes, budget, shares, again)
		}
	}
}
