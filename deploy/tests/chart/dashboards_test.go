package chart

import (
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// Every dashboard is valid JSON with a unique uid, and every query parses as PromQL and
// names its metrics. (Whether the binaries export them is checked in the RBAC test, which
// runs them.)
func TestDashboardsParse(t *testing.T) {
	c, _ := chart(t)
	files, err := filepath.Glob(filepath.Join(c.Dir, "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	uids := map[string]string{}
	for _, f := range files {
		d, err := LoadDashboard(f)
		if err != nil {
			t.Error(err)
			continue
		}
		if other, dup := uids[d.UID]; dup {
			t.Errorf("%s and %s share uid %q", filepath.Base(f), other, d.UID)
		}
		uids[d.UID] = filepath.Base(f)
		if len(d.Queries) == 0 {
			t.Errorf("%s has no queries", filepath.Base(f))
		}
		for _, q := range d.Queries {
			if _, err := MetricNames(q.Expr); err != nil {
				t.Errorf("%s %s: %q: %v", filepath.Base(f), q.Where, q.Expr, err)
			}
		}
	}
}

// The checker itself: a bad expression, a selector without a name and an unknown metric are
// caught; histogram series map to their family.
func TestDashboardChecker(t *testing.T) {
	if _, err := MetricNames(`sum(rate(foo_total[5m])`); err == nil {
		t.Error("unbalanced parenthesis parsed")
	}
	if _, err := MetricNames(`rate({job="x"}[5m])`); err == nil {
		t.Error("a selector without a metric name passed")
	}
	names, err := MetricNames(`histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{job="$job"}[$__rate_interval]))) / on() group_left b`)
	if err != nil || strings.Join(names, ",") != "a_seconds_bucket,b" {
		t.Errorf("got %v, %v", names, err)
	}
	names, err = MetricNames(`label_values(workqueue_depth{name="endpoint"}, job)`)
	if err != nil || strings.Join(names, ",") != "workqueue_depth" {
		t.Errorf("label_values: got %v, %v", names, err)
	}
	fams := map[string]dto.MetricType{"a_seconds": dto.MetricType_HISTOGRAM, "s": dto.MetricType_SUMMARY, "c_total": dto.MetricType_COUNTER}
	for name, want := range map[string]bool{
		"a_seconds_bucket": true, "a_seconds_count": true, "a_seconds": true, "s_sum": true, "s_bucket": false,
		"c_total": true, "c_total_count": false, "nope": false,
	} {
		if got := Exported(name, fams); got != want {
			t.Errorf("Exported(%s) = %v, want %v", name, got, want)
		}
	}
}

// checkDashboardMetrics fails t for every metric path's queries name that exported (what the
// running binaries serve) lacks; missing ends the message, e.g. "which the binary does not
// export".
func checkDashboardMetrics(t *testing.T, path string, exported func(name string) bool, missing string) {
	t.Helper()
	d, err := LoadDashboard(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range d.Queries {
		names, err := MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		for _, n := range names {
			if _, optIn := OptIn[n]; !Synthetic[n] && !optIn && !exported(n) {
				t.Errorf("%s %s queries %s, %s", filepath.Base(path), q.Where, n, missing)
			}
		}
	}
}
