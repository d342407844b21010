package sharding

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestRealisticNamespaces: names a test can create (valid, distinct, none that every cluster
// has), the same on every call, a shorter list a prefix of a longer one, and every family of
// the platform in the first hundred.
func TestRealisticNamespaces(t *testing.T) {
	all := RealisticNamespaces(5000)
	if len(all) != 1188 {
		t.Fatalf("%d names, want the platform's 1192 less the 4 built-in", len(all))
	}
	seen := map[string]bool{}
	for _, ns := range all {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			t.Errorf("%q is not a namespace name: %v", ns, errs)
		}
		if seen[ns] {
			t.Errorf("%q twice", ns)
		}
		seen[ns] = true
		if slices.Contains(builtinNamespaces, ns) {
			t.Errorf("%q exists in every cluster", ns)
		}
	}
	if first := RealisticNamespaces(100); !slices.Equal(first, all[:100]) {
		t.Errorf("RealisticNamespaces(100) is not the first 100 of the full list")
	}
	sets := NameSets()
	for _, set := range sets[:len(sets)-1] {
		if !slices.ContainsFunc(all[:100], func(ns string) bool { return slices.Contains(set.Names, ns) }) {
			t.Errorf("no name of %s in the first 100: the order is not a shuffle", set.Name)
		}
	}
}
