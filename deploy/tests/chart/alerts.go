package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"sigs.k8s.io/yaml"
)

// RuleGroups is a Prometheus rule file: what the tests read of it. (promtool check rules
// validates the file; Prometheus's rulefmt package would pull the rule manager's dependencies
// into this module for no more.)
type RuleGroups struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of rules.
type RuleGroup struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is an alerting or recording rule.
type Rule struct {
	Record      string            `json:"record,omitempty"`
	Alert       string            `json:"alert,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// RuleFile returns the rule groups of a rendered PrometheusRule as a Prometheus rule file
// (what promtool reads), and the groups decoded.
func RuleFile(o Object) ([]byte, *RuleGroups, error) {
	if o.Kind != "PrometheusRule" {
		return nil, nil, fmt.Errorf("%s %s is not a PrometheusRule", o.Kind, o.Name)
	}
	spec, _ := o.Raw["spec"].(map[string]any)
	if spec == nil || spec["groups"] == nil {
		return nil, nil, fmt.Errorf("PrometheusRule %s has no spec.groups", o.Name)
	}
	b, err := yaml.Marshal(map[string]any{"groups": spec["groups"]})
	if err != nil {
		return nil, nil, err
	}
	var groups RuleGroups
	if err := yaml.UnmarshalStrict(b, &groups); err != nil {
		return nil, nil, fmt.Errorf("PrometheusRule %s: %w", o.Name, err)
	}
	return b, &groups, nil
}

// Alerts returns the alerting rules of groups by alert name; an alert name may appear in
// several groups (a per-controller alert), so each name maps to every rule of that name.
func Alerts(groups *RuleGroups) map[string][]Rule {
	out := map[string][]Rule{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = append(out[r.Alert], r)
			}
		}
	}
	return out
}

// promtoolTests is what the coverage check reads of a promtool test file.
type promtoolTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// AlertCoverage reads promtool test files and returns, per alert name, how many checks expect
// it firing and how many expect it silent.
func AlertCoverage(files []string) (firing, silent map[string]int, err error) {
	firing, silent = map[string]int{}, map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		var pt promtoolTests
		if err := yaml.Unmarshal(b, &pt); err != nil { // promtool itself reads them strictly
			return nil, nil, fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		for _, t := range pt.Tests {
			for _, a := range t.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname]++
				} else {
					silent[a.Alertname]++
				}
			}
		}
	}
	return firing, silent, nil
}

// SortedKeys returns m's keys, sorted.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
