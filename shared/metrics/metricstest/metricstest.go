// Package metricstest checks a registry the way every module's metrics tests do: promlint over
// everything it gathers, and the names it exports. Only tests import it, so no binary links it.
package metricstest

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Lint fails t for every problem promlint finds in what g gathers, except in the metrics whose
// names start with one of upstream: names kept as upstream spells them, lint or not (e.g.
// "workqueue_", whose counters have no _total).
func Lint(t testing.TB, g prometheus.Gatherer, upstream ...string) {
	t.Helper()
	problems, err := testutil.GatherAndLint(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if !hasAnyPrefix(p.Metric, upstream) {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

// Names returns the names of the metric families g gathers, sorted, joined by spaces: one
// string a test compares with the list it expects.
func Names(t testing.TB, g prometheus.Gatherer) string {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(families))
	for _, f := range families {
		names = append(names, f.GetName())
	}
	return strings.Join(names, " ")
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// LabelValues returns the values label takes in the series of the metric family name that g
// gathers, sorted, each once, joined by spaces.
func LabelValues(t testing.TB, g prometheus.Gatherer, name, label string) string {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	return strings.Join(slices.Sorted(maps.Keys(seen)), " ")
}
