package kubeadm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

// The alerts are evaluated by a real Prometheus on the host: the chart's own rules (rendered by
// helm template with the run's values, as its PrometheusRule), scraping every binary as the chart
// authorizes a scraper and KCM on 127.0.0.1:10257 (its --bind-address on kubeadm; the host
// reaches it), every 2 s, rules evaluated every 2 s.
const (
	promEvery = 2 * time.Second
	// kcmJob is KCM's scrape job: the chart's prometheusRule.kubeControllerManagerJob default.
	kcmJob = "kube-controller-manager"
	// scraperSA is the ServiceAccount Prometheus scrapes with, bound to system:monitoring (get
	// /metrics), which both the binaries and KCM authorize by a SubjectAccessReview.
	scraperSA = "kae2e-prometheus"
)

// prometheus is the run's Prometheus.
type prometheus struct {
	base string
	dir  string
	proc *os.Process
	// start is when alerts count: every target up, the rules evaluated since.
	start time.Time
}

// startPrometheus renders the chart's rules, writes the scrape configuration and starts
// bin/prometheus; it is killed when the test ends.
// Over 80 lines: the scraper's credentials, the rules, the targets and the process, in the order each needs the previous.
func (e *e2e) startPrometheus() *prometheus {
	t := e.t
	t.Helper()
	dir := filepath.Join(e.work, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The scraper's token.
	ctx := e.ctx
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: scraperSA, Namespace: namespace}}
	if _, err := e.client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: scraperSA},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:monitoring"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: scraperSA, Namespace: namespace}}}
	if _, err := e.client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hour := int64(3600)
	tok, err := e.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, scraperSA,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(tok.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}

	// The rules: the chart's PrometheusRule for the values the runbook installed.
	if _, err := e.writeRules(dir); err != nil {
		t.Fatal(err)
	}

	// The targets: each binary's Pods under its Service's name (the job a ServiceMonitor gives),
	// and KCM.
	svcs, err := e.client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := e.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\nrule_files: [%s]\nscrape_configs:\n",
		promEvery, promEvery, promEvery, filepath.Join(dir, "rules.yaml"))
	job := func(name, target string, labels map[string]string) {
		var l []string
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			l = append(l, fmt.Sprintf("%s: %q", k, labels[k]))
		}
		fmt.Fprintf(&cfg, "- job_name: %s\n  scheme: https\n  authorization: {type: Bearer, credentials_file: %s}\n  tls_config: {insecure_skip_verify: true}\n"+
			"  static_configs:\n  - targets: ['%s']\n    labels: {%s}\n", name, tokenFile, target, strings.Join(l, ", "))
	}
	n := 0
	for _, s := range svcs.Items {
		for _, p := range pods.Items {
			if p.Labels["app.kubernetes.io/component"] != s.Spec.Selector["app.kubernetes.io/component"] || p.Status.PodIP == "" {
				continue
			}
			port := p.Spec.Containers[0].Ports[0].ContainerPort
			job(s.Name+"-"+p.Name, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))),
				map[string]string{"job": s.Name, "namespace": namespace, "service": s.Name, "pod": p.Name, "endpoint": "https"})
			n++
		}
	}
	if n != len(binaries) {
		t.Fatalf("%d binary Pods to scrape, want %d", n, len(binaries))
	}
	job(kcmJob, "127.0.0.1:10257", map[string]string{"job": kcmJob, "namespace": "kube-system"})
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("prometheus", "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = logf.Close() })
	p := &prometheus{base: "http://" + addr, dir: dir, proc: cmd.Process}
	// Every target up: the binaries and KCM authorized the scraper.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		res, err := p.query("up", time.Now())
		if err != nil {
			return false, nil
		}
		up := 0
		for _, r := range res {
			if r.value() == 1 {
				up++
			}
		}
		return up == len(binaries)+1, nil
	})
	if err != nil {
		t.Fatalf("not every target up (%s): %v", filepath.Join(dir, "prometheus.log"), err)
	}
	// Alerts count from the second evaluation after every target was up: before its first
	// scrape of a job, an absent() rule is pending.
	p.start = time.Now().Add(2 * promEvery)
	e.logf("Prometheus scrapes the %d binaries and KCM; %s", len(binaries), filepath.Join(dir, "rules.yaml"))
	return p
}

// writeRules writes dir/rules.yaml: the chart's PrometheusRule rendered with the release's own
// values as the runbook's helm commands left them (a value such as prometheusRule.disabled set by
// a step counts, as it would in the operator's Prometheus), and returns the alerts' names.
func (e *e2e) writeRules(dir string) ([]string, error) {
	vals, err := exec.CommandContext(e.ctx, "helm", "get", "values", release, "--namespace", namespace, "-o", "yaml").Output()
	if err != nil {
		return nil, fmt.Errorf("helm get values: %w", err)
	}
	valsFile := filepath.Join(dir, "release-values.yaml")
	if err := os.WriteFile(valsFile, vals, 0o644); err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(e.ctx, "helm", "template", release, filepath.Join(e.root, "charts", "kcm-split"), "--namespace", namespace,
		"-f", valsFile, "--set", "prometheusRule.enabled=true", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule",
		"--show-only", "templates/prometheusrule.yaml").Output()
	if err != nil {
		return nil, fmt.Errorf("helm template the PrometheusRule: %w", err)
	}
	var pr struct {
		Spec struct {
			Groups []map[string]any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &pr); err != nil || len(pr.Spec.Groups) == 0 {
		return nil, fmt.Errorf("the rendered PrometheusRule has no groups: %v", err)
	}
	var alerts []string
	for _, g := range pr.Spec.Groups {
		rules, _ := g["rules"].([]any)
		for _, r := range rules {
			if m, ok := r.(map[string]any); ok {
				if a, ok := m["alert"].(string); ok {
					alerts = append(alerts, a)
				}
			}
		}
	}
	rules, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		return nil, err
	}
	return alerts, os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644)
}

// reloadRules renders the rules again from the release's values and has Prometheus load them
// (SIGHUP), as the operator's Prometheus picks up a changed PrometheusRule; it returns once
// Prometheus serves exactly the rendered alerts.
func (e *e2e) reloadRules(p *prometheus) {
	t := e.t
	t.Helper()
	want, err := e.writeRules(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if err := p.proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got, err = p.alertNames()
		if err != nil {
			return false, nil
		}
		slices.Sort(got)
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("Prometheus serves the alerts %v, want %v after the reload (%s)", got, want, filepath.Join(p.dir, "prometheus.log"))
	}
	e.logf("Prometheus reloaded the rules: %d alerts", len(got))
}

// alertNames are the alerting rules Prometheus serves.
func (p *prometheus) alertNames() ([]string, error) {
	resp, err := http.Get(p.base + "/api/v1/rules?type=alert")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name string `json:"name"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	var names []string
	for _, g := range body.Data.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Name)
		}
	}
	return names, nil
}

// series is one series of a query's answer.
type series struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

func (s series) value() float64 {
	if len(s.Value) != 2 {
		return 0
	}
	str, _ := s.Value[1].(string)
	v, _ := strconv.ParseFloat(str, 64)
	return v
}

func (p *prometheus) get(path string, q url.Values) ([]series, error) {
	resp, err := http.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []series `json:"result"`
		} `json:"data"`
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(buf.Bytes(), &body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", path, body.Error)
	}
	return body.Data.Result, nil
}

func (p *prometheus) query(q string, at time.Time) ([]series, error) {
	return p.get("/api/v1/query", url.Values{"query": {q}, "time": {strconv.FormatInt(at.Unix(), 10)}})
}

// alertSeries is one episode of one alert (its labels but alertstate) pending or firing during
// the run: evaluations less than episodeGap apart belong to one episode.
type alertSeries struct {
	Name, Labels string
	First, Last  time.Time
	Fired        bool // firing at some point of the episode, not only pending
	// Planned and Trap count the evaluations (2 s apart) at which it was pending or firing
	// outside the trap, and during it.
	Planned, Trap int
}

// episodeGap splits an alert's evaluations into episodes: a condition that ended and came back
// later (in the trap, then again during the rollback) is two, each judged by its own start.
const episodeGap = 10 * time.Second

// criticalAlerts are the critical alerts pending or firing between from and to, by series and
// episode; trapFrom and trapTo bound the trap (its render to the binaries active again after
// the fix).
func (p *prometheus) criticalAlerts(from, to, trapFrom, trapTo time.Time) ([]alertSeries, error) {
	res, err := p.get("/api/v1/query_range", url.Values{"query": {`ALERTS{severity="critical"}`},
		"start": {strconv.FormatInt(from.Unix(), 10)}, "end": {strconv.FormatInt(to.Unix(), 10)}, "step": {"2"}})
	if err != nil {
		return nil, err
	}
	type sample struct {
		at     time.Time
		firing bool
	}
	byKey := map[string][]sample{}
	for _, s := range res {
		var l []string
		for _, k := range slices.Sorted(maps.Keys(s.Metric)) {
			if k != "alertstate" && k != "__name__" && k != "alertname" {
				l = append(l, k+"="+s.Metric[k])
			}
		}
		key := s.Metric["alertname"] + "{" + strings.Join(l, ",") + "}"
		for _, v := range s.Values {
			f, _ := v[0].(float64)
			byKey[key] = append(byKey[key], sample{time.Unix(0, int64(f*1e9)), s.Metric["alertstate"] == "firing"})
		}
	}
	var out []alertSeries
	for key, samples := range byKey {
		name, labels, _ := strings.Cut(strings.TrimSuffix(key, "}"), "{")
		slices.SortFunc(samples, func(a, b sample) int { return a.at.Compare(b.at) })
		var a *alertSeries
		for _, smp := range samples {
			if a == nil || smp.at.Sub(a.Last) > episodeGap {
				out = append(out, alertSeries{Name: name, Labels: labels, First: smp.at})
				a = &out[len(out)-1]
			}
			a.Last = smp.at
			a.Fired = a.Fired || smp.firing
			if smp.at.Before(trapFrom) || smp.at.After(trapTo) {
				a.Planned++
			} else {
				a.Trap++
			}
		}
	}
	slices.SortFunc(out, func(a, b alertSeries) int { return a.First.Compare(b.First) })
	return out, nil
}

func TestCriticalAlertsSeriesAndTheTrap(t *testing.T) {
	// Two series of one alert (pending, then firing), another alert, and the first alert again
	// after a gap, as Prometheus's query_range answers ALERTS{severity="critical"}.
	body := `{"status":"success","data":{"resultType":"matrix","result":[
{"metric":{"__name__":"ALERTS","alertname":"A","alertstate":"pending","severity":"critical","job":"j"},"values":[[100,"1"],[102,"1"],[104,"1"]]},
{"metric":{"__name__":"ALERTS","alertname":"A","alertstate":"firing","severity":"critical","job":"j"},"values":[[106,"1"]]},
{"metric":{"__name__":"ALERTS","alertname":"A","alertstate":"pending","severity":"critical","job":"j"},"values":[[280,"1"],[282,"1"]]},
{"metric":{"__name__":"ALERTS","alertname":"B","alertstate":"pending","severity":"critical"},"values":[[200,"1"],[202,"1"]]}]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query_range" || r.URL.Query().Get("query") != `ALERTS{severity="critical"}` {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	p := &prometheus{base: srv.URL}
	got, err := p.criticalAlerts(time.Unix(0, 0), time.Unix(300, 0), time.Unix(103, 0), time.Unix(250, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("series %+v, want A, B and A's second episode", got)
	}
	a, b, again := got[0], got[1], got[2]
	if a.Name != "A" || a.Labels != "job=j,severity=critical" || !a.Fired || a.Planned != 2 || a.Trap != 2 ||
		!a.First.Equal(time.Unix(100, 0)) || !a.Last.Equal(time.Unix(106, 0)) {
		t.Errorf("A = %+v: want pending at 100 and 102 (planned), 104 and 106 in the trap, fired", a)
	}
	if b.Name != "B" || b.Fired || b.Planned != 0 || b.Trap != 2 {
		t.Errorf("B = %+v: want pending twice in the trap", b)
	}
	// After the trap: an episode of its own, judged by its own start (a false alert).
	if again.Name != "A" || again.Fired || again.Planned != 2 || again.Trap != 0 || !again.First.Equal(time.Unix(280, 0)) {
		t.Errorf("A's second episode = %+v: want pending at 280 and 282, outside the trap", again)
	}
}
