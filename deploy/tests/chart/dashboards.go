package chart

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// Dashboard is what the tests read of a Grafana dashboard.
type Dashboard struct {
	UID     string
	Title   string
	Queries []Query
}

// Query is one PromQL expression of a dashboard and where it is.
type Query struct {
	Where string // panel title or variable name
	Expr  string
}

type grafanaPanel struct {
	Title   string         `json:"title"`
	Type    string         `json:"type"`
	Targets []grafanaQuery `json:"targets"`
	Panels  []grafanaPanel `json:"panels"` // a collapsed row's panels
}

type grafanaQuery struct {
	Expr string `json:"expr"`
}

type grafanaDashboard struct {
	UID        string         `json:"uid"`
	Title      string         `json:"title"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// LoadDashboard reads a dashboard file: it must be valid JSON with a uid and a title, and
// every panel but rows and text must have a query.
func LoadDashboard(path string) (*Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var g grafanaDashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&g); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %w", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: trailing data after the dashboard", path)
	}
	if g.UID == "" || g.Title == "" {
		return nil, fmt.Errorf("%s: uid and title are required", path)
	}
	d := &Dashboard{UID: g.UID, Title: g.Title}
	var walk func([]grafanaPanel) error
	walk = func(ps []grafanaPanel) error {
		for _, p := range ps {
			if err := walk(p.Panels); err != nil {
				return err
			}
			if p.Type == "row" || p.Type == "text" {
				continue
			}
			if len(p.Targets) == 0 {
				return fmt.Errorf("%s: panel %q has no query", path, p.Title)
			}
			for _, t := range p.Targets {
				d.Queries = append(d.Queries, Query{Where: "panel " + p.Title, Expr: t.Expr})
			}
		}
		return nil
	}
	if err := walk(g.Panels); err != nil {
		return nil, err
	}
	for _, v := range g.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("%s: variable %s: unreadable query", path, v.Name)
			}
			q = obj.Query
		}
		d.Queries = append(d.Queries, Query{Where: "variable " + v.Name, Expr: q})
	}
	return d, nil
}

var (
	// Grafana's interval variables stand where PromQL wants a duration.
	intervalVar = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}`)
	// label_values(<selector>, label) and query_result(<expr>) are Grafana variable queries
	// wrapping PromQL.
	labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	queryResult = regexp.MustCompile(`^\s*query_result\((.*)\)\s*$`)
)

// PromQL returns the PromQL inside a panel or variable query, with Grafana's interval
// variables replaced by a duration. Other variables ($job) only appear inside label matcher
// strings, where PromQL takes them as literal text.
func PromQL(q string) string {
	if m := labelValues.FindStringSubmatch(q); m != nil {
		q = m[1]
	} else if m := queryResult.FindStringSubmatch(q); m != nil {
		q = m[1]
	}
	return intervalVar.ReplaceAllString(q, "5m")
}

// MetricNames parses expr (as PromQL, with the standard Prometheus parser) and returns the
// metric names it selects, sorted. A selector without a metric name is an error: a
// dashboard must say what it reads.
func MetricNames(expr string) ([]string, error) {
	e, err := parser.ParseExpr(PromQL(expr))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel && m.Type.String() == "=" {
					name = m.Value
				}
			}
		}
		if name == "" {
			bad = fmt.Errorf("selector %s names no metric", vs.String())
			return nil
		}
		seen[name] = true
		return nil
	})
	if bad != nil {
		return nil, bad
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// Families reads the metric families of a /metrics body (Prometheus text format) from its
// "# TYPE name type" lines. (expfmt's parser changed its constructor between the
// prometheus/common versions this module and the workspace resolve to; the TYPE lines are
// all this needs.)
func Families(body string) (map[string]dto.MetricType, error) {
	types := map[string]dto.MetricType{
		"counter": dto.MetricType_COUNTER, "gauge": dto.MetricType_GAUGE, "histogram": dto.MetricType_HISTOGRAM,
		"gaugehistogram": dto.MetricType_GAUGE_HISTOGRAM, "summary": dto.MetricType_SUMMARY, "untyped": dto.MetricType_UNTYPED,
	}
	out := map[string]dto.MetricType{}
	for _, line := range strings.Split(body, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		t, ok := types[f[3]]
		if !ok {
			return nil, fmt.Errorf("unknown metric type in %q", line)
		}
		out[f[2]] = t
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no # TYPE lines in %d bytes of /metrics", len(body))
	}
	return out, nil
}

// Synthetic are series Prometheus itself adds to every scrape target; no binary exports them.
var Synthetic = map[string]bool{"up": true, "scrape_duration_seconds": true, "scrape_samples_scraped": true}

// OptIn are metrics a binary exports only when a flag asks for them: a dashboard or an alert may
// query them though a binary run with its defaults lacks them. The live test
// (dashboards_live_test.go) runs a replica with the flags, or `make up ENDPOINTS_SHARDS=2`'s
// leading shards, so their panels are still proven to show data.
var OptIn = map[string]string{
	"kcm_split_takeover_proven":               "--take-over-from-kcm",
	"kcm_split_takeover_kcm_runs_controllers": "--take-over-from-kcm",
	"kcm_split_takeover_lapses_total":         "--take-over-from-kcm",
	"kcm_split_shard_layout_blocking_leases":  "--shards",
	// A shard's View exists with --shards above 1, its series once the shard leads.
	"kcm_split_shard_info":                      "--shards",
	"kcm_split_shard_objects":                   "--shards",
	"kcm_split_shard_largest_namespace_objects": "--shards",
}

// Exported reports whether a query's metric name is one of families: the family itself, or
// a histogram's or summary's _bucket, _sum or _count series.
func Exported(name string, families map[string]dto.MetricType) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch families[base] {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			return true
		case dto.MetricType_SUMMARY:
			if suffix != "_bucket" {
				return true
			}
		}
	}
	return false
}
