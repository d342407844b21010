package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Release and namespace the promtool tests' series are written for: the default job of a
// controller is the Service name, kcm-split-<binary>.
const (
	alertRelease   = "kcm-split"
	alertNamespace = "kube-system"
	// promtoolRunbook stands for the runbook base in the promtool tests' expected annotations
	// (the default follows the chart's version, which a test file should not repeat).
	promtoolRunbook = "RUNBOOK.md"
)

var ruleCapability = []string{"--api-versions", "monitoring.coreos.com/v1/PrometheusRule"}

// ruleArgs enables every controller, the PrometheusRule and the opt-in scrape of
// kube-controller-manager's job (every alert the chart can render), then appends more.
func ruleArgs(v *Values, more ...string) []string {
	args := append([]string{}, ruleCapability...)
	args = append(args, "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.kubeControllerManagerJob=kube-controller-manager")
	for _, a := range v.Aliases() {
		args = append(args, "--set", "controllers."+a+".enabled=true")
	}
	return append(args, more...)
}

// defaultRunbook is the runbook_url base with prometheusRule.runbookBaseURL empty: RUNBOOK.md
// on GitHub at the tag the release workflow gives this chart version.
func defaultRunbook(t *testing.T, c *Chart) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Name, Version, Home string }
	if err := yaml.Unmarshal(b, &meta); err != nil || meta.Version == "" || meta.Home == "" {
		t.Fatalf("Chart.yaml: %v %+v", err, meta)
	}
	return strings.TrimSuffix(meta.Home, "/") + "/blob/v" + meta.Version + "/charts/" + meta.Name + "/RUNBOOK.md"
}

// renderRules renders the chart and returns its one PrometheusRule as a rule file.
func renderRules(t *testing.T, c *Chart, args ...string) (Object, []byte, *RuleGroups) {
	t.Helper()
	prs := byKind(render(t, c, alertRelease, alertNamespace, args...), "PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("want one PrometheusRule, got %d", len(prs))
	}
	b, groups, err := RuleFile(prs[0])
	if err != nil {
		t.Fatal(err)
	}
	return prs[0], b, groups
}

func promtool(t *testing.T) string {
	t.Helper()
	dir, err := testenv.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "promtool")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found: run `make tools` first (it builds promtool into bin/)", p)
	}
	return p
}

func runPromtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

var runbookHeading = regexp.MustCompile(`(?m)^## (\S+)\s*$`)

// runbookSections returns RUNBOOK.md's "## <name>" sections by GitHub anchor (the name,
// lower case) with their text.
func runbookSections(t *testing.T, c *Chart) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, "RUNBOOK.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	out := map[string]string{}
	idx := runbookHeading.FindAllStringSubmatchIndex(s, -1)
	for i, m := range idx {
		end := len(s)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		out[strings.ToLower(s[m[2]:m[3]])] = s[m[1]:end]
	}
	return out
}

// Every alert the chart renders (every controller on) passes `promtool check rules`, has a
// severity, a summary, a description and a runbook_url whose anchor is a RUNBOOK.md section
// with meaning, impact, diagnosis and mitigation, is listed in the chart README, and has
// promtool unit tests (deploy/tests/chart/alerts) that expect it firing and silent; then
// `promtool test rules` runs them on the rendered rules.
// Over 80 lines: one rendered rule file through promtool check, the runbook, the coverage, promtool test, then the tests on never-firing rules.
func TestAlertRules(t *testing.T) {
	c, v := chart(t)
	_, rules, groups := renderRules(t, c, ruleArgs(v)...)
	runbook := defaultRunbook(t, c)
	for _, p := range []string{"__JOB__", "__CONTROLLER__", "__KCM_SPLIT_JOBS__", "__KCM_JOB__", "__TAKEOVER_WAITING_FOR__", "__MIGRATION_UNFINISHED_FOR__"} {
		if bytes.Contains(rules, []byte(p)) {
			t.Errorf("placeholder %s left in the rendered rules", p)
		}
	}
	dir := t.TempDir()
	rules = bytes.ReplaceAll(rules, []byte(runbook+"#"), []byte(promtoolRunbook+"#"))
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runPromtool(t, dir, "check", "rules", "rules.yaml"); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	alerts := Alerts(groups)
	if len(alerts) == 0 {
		t.Fatal("no alerts rendered")
	}
	sections := runbookSections(t, c)
	readme, err := os.ReadFile(filepath.Join(c.Dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range SortedKeys(alerts) {
		for _, r := range alerts[name] {
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("%s: severity %q, want critical, warning or info", name, s)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s", name, a)
				}
			}
			if want := runbook + "#" + strings.ToLower(name); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", name, r.Annotations["runbook_url"], want)
			}
		}
		sec, ok := sections[strings.ToLower(name)]
		if !ok {
			t.Errorf("%s: RUNBOOK.md has no section \"## %s\"", name, name)
		}
		for _, part := range []string{"Meaning", "Impact", "Diagnosis", "Mitigation"} {
			if ok && !strings.Contains(sec, "**"+part+"**") {
				t.Errorf("RUNBOOK.md %s: no **%s**", name, part)
			}
		}
		if !bytes.Contains(readme, []byte("`"+name+"`")) {
			t.Errorf("%s is not listed in the chart README", name)
		}
	}
	for anchor := range sections {
		found := false
		for name := range alerts {
			found = found || strings.ToLower(name) == anchor
		}
		if !found {
			t.Errorf("RUNBOOK.md section %q is no alert's", anchor)
		}
	}

	tests, err := filepath.Glob(filepath.Join("alerts", "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no promtool tests in alerts/: %v", err)
	}
	firing, silent, err := AlertCoverage(tests)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range SortedKeys(alerts) {
		if firing[name] == 0 {
			t.Errorf("%s: no promtool test expects it to fire", name)
		}
		if silent[name] == 0 {
			t.Errorf("%s: no promtool test expects it silent", name)
		}
	}
	for _, name := range append(SortedKeys(firing), SortedKeys(silent)...) {
		if _, ok := alerts[name]; !ok {
			t.Errorf("promtool tests check %s, which the chart does not render", name)
		}
	}
	var names []string
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(f))
	}
	start := time.Now()
	out, err := runPromtool(t, dir, append([]string{"test", "rules"}, names...)...)
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("promtool test rules: %d files, %d alerts, %s", len(names), len(alerts), time.Since(start).Round(time.Millisecond))

	// The same tests on rules that never fire must fail: the tests bite (one file shows it,
	// at half the cost of both).
	var never RuleGroups
	for _, g := range groups.Groups {
		for i := range g.Rules {
			if g.Rules[i].Alert != "" {
				g.Rules[i].Expr = "(" + g.Rules[i].Expr + ") unless on() vector(1)"
			}
		}
		never.Groups = append(never.Groups, g)
	}
	b, err := yaml.Marshal(never)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runPromtool(t, dir, "test", "rules", names[0]); err == nil {
		t.Errorf("promtool test rules passed on rules that never fire:\n%s", out)
	}
}

// The PrometheusRule is off by default and needs the CRD; prometheusRule.* values do what
// values.yaml says.
// Over 80 lines: one value after another, each rendered and checked in turn.
func TestPrometheusRuleValues(t *testing.T) {
	c, v := chart(t)
	all := ruleArgs(v)
	if n := len(byKind(render(t, c, alertRelease, alertNamespace, append(ruleCapability, all[len(ruleCapability)+2:]...)...), "PrometheusRule")); n != 0 {
		t.Errorf("off by default, yet %d PrometheusRules rendered", n)
	}
	if n := len(byKind(render(t, c, alertRelease, alertNamespace, all[len(ruleCapability):]...), "PrometheusRule")); n != 0 {
		t.Errorf("enabled without the CRD, yet %d PrometheusRules rendered", n)
	}
	if n := len(byKind(render(t, c, alertRelease, alertNamespace, append(ruleCapability, "--set", "prometheusRule.enabled=true")...), "PrometheusRule")); n != 0 {
		t.Errorf("no controller enabled, yet %d PrometheusRules rendered", n)
	}

	o, _, groups := renderRules(t, c, ruleArgs(v,
		"--set", "prometheusRule.namespace=monitoring",
		"--set", "prometheusRule.labels.release=prom",
		"--set", "prometheusRule.additionalRuleLabels.team=platform",
		"--set", "prometheusRule.additionalRuleLabels.severity=none",
		"--set", "prometheusRule.disabled.KcmSplitFencedWrites=true",
		"--set", "prometheusRule.runbookBaseURL=https://runbooks.example.com/kcm-split/",
		"--set", "prometheusRule.kubeControllerManagerJob=kcm",
		"--set", "prometheusRule.extraRules[0].alert=MyAlert",
		"--set", "prometheusRule.extraRules[0].expr=vector(1)",
	)...)
	if o.Namespace != "monitoring" {
		t.Errorf("namespace %q, want monitoring", o.Namespace)
	}
	if l, _ := o.Raw["metadata"].(map[string]any)["labels"].(map[string]any); l["release"] != "prom" {
		t.Errorf("labels %v lack release=prom", l)
	}
	alerts := Alerts(groups)
	if _, ok := alerts["KcmSplitFencedWrites"]; ok {
		t.Error("KcmSplitFencedWrites disabled, yet rendered")
	}
	if _, ok := alerts["MyAlert"]; !ok {
		t.Error("extra rule MyAlert not rendered")
	}
	for name, rs := range alerts {
		for _, r := range rs {
			if name == "MyAlert" {
				continue
			}
			if r.Labels["team"] != "platform" {
				t.Errorf("%s: labels %v lack team=platform", name, r.Labels)
			}
			if r.Labels["severity"] == "none" {
				t.Errorf("%s: additionalRuleLabels overrode its severity", name)
			}
			if want := "https://runbooks.example.com/kcm-split#" + strings.ToLower(name); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", name, r.Annotations["runbook_url"], want)
			}
		}
	}
	if !strings.Contains(alerts["KcmSplitKubeControllerManagerStillRunning"][0].Expr, `job="kcm"`) {
		t.Errorf("kubeControllerManagerJob not used: %s", alerts["KcmSplitKubeControllerManagerStillRunning"][0].Expr)
	}

	// kube-controller-manager's scrape is opt-in: without its job, the rule that reads it is
	// left out and the one that reads the API stays; the waits' thresholds are values.
	_, _, groups = renderRules(t, c, append(append([]string{}, ruleCapability...),
		"--set", "prometheusRule.enabled=true", "--set", "controllers.quota.enabled=true",
		"--set", "prometheusRule.takeOverWaitingFor=2h", "--set", "prometheusRule.migrationUnfinishedFor=45m")...)
	alerts = Alerts(groups)
	if _, ok := alerts["KcmSplitKubeControllerManagerStillRunning"]; ok {
		t.Error("KcmSplitKubeControllerManagerStillRunning rendered without prometheusRule.kubeControllerManagerJob")
	}
	if _, ok := alerts["KcmSplitKubeControllerManagerRunsAgain"]; !ok {
		t.Error("KcmSplitKubeControllerManagerRunsAgain not rendered by default")
	}
	for name, want := range map[string]string{"KcmSplitTakeOverWaiting": "2h", "KcmSplitLeaderMigrationUnfinished": "45m"} {
		if rs := alerts[name]; len(rs) != 1 || rs[0].For != want || !strings.Contains(rs[0].Annotations["summary"], want) {
			t.Errorf("%s: %+v, want for %s, also in its summary", name, rs, want)
		}
	}

	// Only the enabled controllers' alerts and jobs.
	_, _, groups = renderRules(t, c, append(append([]string{}, ruleCapability...),
		"--set", "prometheusRule.enabled=true", "--set", "controllers.quota.enabled=true")...)
	alerts = Alerts(groups)
	if len(alerts["KcmSplitControllerDown"]) != 1 || !strings.Contains(alerts["KcmSplitControllerDown"][0].Expr, `job="kcm-split-quota-controller"`) {
		t.Errorf("quota alone: KcmSplitControllerDown %v", alerts["KcmSplitControllerDown"])
	}
	for _, other := range []string{"KcmSplitNamespaceStuckTerminating", "KcmSplitLBPoolExhausted", "KcmSplitNodesWaitingForCIDR", "KcmSplitPVBindingSlow"} {
		if _, ok := alerts[other]; ok {
			t.Errorf("quota alone, yet %s rendered", other)
		}
	}
	if !strings.Contains(alerts["KcmSplitNoLeader"][0].Expr, `job=~"kcm-split-quota-controller"`) {
		t.Errorf("KcmSplitNoLeader selects %s", alerts["KcmSplitNoLeader"][0].Expr)
	}
}
