package sharding

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		{Shard{0, 1}, ""}, {Shard{3, 4}, ""},
		{Shard{0, 0}, "shards"}, {Shard{0, MaxShards + 1}, "shards"},
		{Shard{4, 4}, "shard-index"}, {Shard{-1, 2}, "shard-index"},
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
	if got := (Shard{1, 4}).LeaseName("endpoints-controller"); got != "endpoints-controller-shard-1-of-4" {
		t.Errorf("shard Lease %q", got)
	}
}
