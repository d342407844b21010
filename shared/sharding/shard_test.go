package sharding

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apisharding "k8s.io/apimachinery/pkg/sharding"
)

func TestRangesTileTheHashSpace(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 7} {
		prev := "0x0000000000000000"
		for i := range n {
			lo, hi := Shard{Index: i, Count: n}.Range()
			if lo != prev {
				t.Errorf("%d-of-%d starts at %s, previous ended at %s", i, n, lo, prev)
			}
			prev = hi
		}
		if prev != "0x10000000000000000" {
			t.Errorf("last of %d ends at %s", n, prev)
		}
	}
}

func TestEveryNamespaceHasExactlyOneOwner(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		for k := range 200 {
			ns := fmt.Sprintf("ns-%d", k)
			owners := 0
			for i := range n {
				s := Shard{Index: i, Count: n}
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}
				m, err := s.Selector().Matches(pod)
				if err != nil {
					t.Fatal(err)
				}
				if m != s.Owns(ns) {
					t.Fatalf("%s: Owns(%s)=%t, selector says %t", s, ns, s.Owns(ns), m)
				}
				if m {
					owners++
				}
			}
			if owners != 1 {
				t.Fatalf("%s has %d owners among %d shards", ns, owners, n)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		s     Shard
		field string
	}{
		{Shard{Index: 0, Count: 1}, ""}, {Shard{Index: 3, Count: 4}, ""},
		{Shard{Index: 0, Count: 0}, "shards"}, {Shard{Index: 0, Count: MaxShards + 1}, "shards"},
		{Shard{Index: 4, Count: 4}, "shard-index"}, {Shard{Index: -1, Count: 2}, "shard-index"},
		{Shard{Index: 0, Count: 2, Hash: HashMixed}, ""}, {Shard{Index: 0, Count: 2, Hash: "md5"}, "shard-hash"},
	} {
		err := c.s.Validate()
		var se *Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%+v: %v", c.s, err)
		case c.field != "" && (!errors.As(err, &se) || se.Field != c.field):
			t.Errorf("%+v: want an error on %s, got %v", c.s, c.field, err)
		}
	}
}

func TestLeaseName(t *testing.T) {
	if got := Whole.LeaseName("endpoints-controller"); got != "endpoints-controller" {
		t.Errorf("unsharded Lease %q", got)
	}
	if got := (Shard{Index: 1, Count: 4}).LeaseName("endpoints-controller"); got != "endpoints-controller-shard-1-of-4" {
		t.Errorf("shard Lease %q", got)
	}
}

// TestMixedHashSpreadsAFamily: names sharing a prefix all fall in one range of the KEP's hash
// and spread over every range of the mixed one, each name owned by exactly one shard.
func TestMixedHashSpreadsAFamily(t *testing.T) {
	const n = 4
	names := familyNames("tenant-%03d", 100)
	for _, h := range Hashes {
		counts := make([]int, n)
		for _, ns := range names {
			owners := 0
			for i := range n {
				if (Shard{Index: i, Count: n, Hash: h}).Owns(ns) {
					counts[i]++
					owners++
				}
			}
			if owners != 1 {
				t.Fatalf("%s: %s has %d owners", h, ns, owners)
			}
		}
		lo, hi := slices.Min(counts), slices.Max(counts)
		switch h {
		case HashFNV:
			if hi != 100 {
				t.Errorf("fnv spread %v: the KEP's hash no longer puts tenant-000..099 in one range; the README's table is stale", counts)
			}
		case HashMixed:
			if lo < 15 || hi > 35 {
				t.Errorf("mixed spread %v, want each shard within 15..35 of 100", counts)
			}
		}
	}
}

func TestHashValues(t *testing.T) {
	for _, ns := range []string{"", "kube-system", "tenant-0042"} {
		if got, want := fmt.Sprintf("%016x", HashFNV.Sum(ns)), apisharding.HashField(ns); got != want {
			t.Errorf("fnv of %q = %s, the apiserver's %s", ns, got, want)
		}
		if Hash("").Sum(ns) != HashFNV.Sum(ns) {
			t.Errorf("the zero Hash is not fnv for %q", ns)
		}
	}
	// fmix64 maps 0 to 0, and is applied to the KEP's value.
	if fmix64(0) != 0 || HashMixed.Sum("a") != fmix64(HashFNV.Sum("a")) || HashMixed.Sum("a") == HashFNV.Sum("a") {
		t.Error("mixed is not fmix64 of the KEP's hash")
	}
	for _, c := range []struct {
		in   string
		want Hash
		ok   bool
	}{{"", HashFNV, true}, {"fnv", HashFNV, true}, {"mixed", HashMixed, true}, {"murmur", "", false}} {
		h, err := ParseHash(c.in)
		if h != c.want || (err == nil) != c.ok {
			t.Errorf("ParseHash(%q) = %q, %v", c.in, h, err)
		}
	}
}

func TestMixedLeaseNameAndLabels(t *testing.T) {
	s := Shard{Index: 1, Count: 4, Hash: HashMixed}
	if got := s.LeaseName("ep"); got != "ep-shard-1-of-4-mixed" {
		t.Errorf("mixed shard Lease %q", got)
	}
	if got := (Shard{Index: 0, Count: 1, Hash: HashMixed}).LeaseName("ep"); got != "ep" {
		t.Errorf("one mixed shard's Lease %q, want the unsharded one", got)
	}
	if l := s.LeaseLabels("ep"); l[LabelHash] != "mixed" {
		t.Errorf("labels %v lack the hash", l)
	}
	for _, fnvShard := range []Shard{{Index: 1, Count: 4}, {Index: 1, Count: 4, Hash: HashFNV}, {Index: 0, Count: 1, Hash: HashMixed}} {
		if _, ok := fnvShard.LeaseLabels("ep")[LabelHash]; ok {
			t.Errorf("%+v: a hash label (fnv and one shard keep the labels they had)", fnvShard)
		}
	}
	if a, b := (Shard{Count: 4}).Layout(), s.Layout(); a == b {
		t.Errorf("fnv and mixed at 4 shards are one layout %q", a)
	}
	if a, b := (Shard{Count: 1}).Layout(), (Shard{Count: 1, Hash: HashMixed}).Layout(); a != b {
		t.Errorf("one shard is two layouts: %q, %q", a, b)
	}
}
