package chart

//lint:file-ignore SA1019 core/v1 Endpoints are what the endpoints and mirroring controllers read and write

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
)

// liveEnv turns TestDashboardsLive on; `make dashboards-e2e` sets it while `make up` runs.
const liveEnv = "KCM_SPLIT_DASHBOARDS_E2E"

// Prometheus scrapes every 2 s; Grafana's $__rate_interval is at least four scrape intervals,
// so queries are evaluated with 10 s windows.
const (
	scrapeInterval = 2 * time.Second
	rateWindow     = "10s"
)

// liveExpect is what chosen panels of a dashboard must show, label by label: every value listed
// must be among the panel's series (the queues and the upstream controllers each binary runs,
// the values a panel that filters or groups on them must show).
var liveExpect = map[string]map[string]map[string][]string{
	"endpoints": {
		"Depth":                                                    {"name": {"endpoint", "endpoint_slice", "endpoint_slice_mirroring"}},
		"Reconciles by controller and result":                      {"controller": {"endpoints-controller", "endpointslice-controller", "endpointslice-mirroring-controller"}},
		"EndpointSlice writes by operation":                        {"operation": {"create"}},
		"Mirrored EndpointSlice writes by operation":               {"operation": {"create"}},
		"Foreign writer episodes by controller":                    {"controller": {"endpoints-controller", "endpointslice-controller", "endpointslice-mirroring-controller"}},
		"Shard layout: Leases of another layout blocking":          {"shards": {"2", "3"}},
		"Objects per shard":                                        {"shard": {"0", "1"}, "resource": {"pods", "services"}},
		"Shard spread: max over mean objects":                      {"shards": {"2"}, "resource": {"pods", "services"}},
		"Largest namespace of each shard, and the mean of a shard": {"resource": {"pods", "services"}},
		"Filtering mode by shard and resource":                     {"shard": {"0", "1"}, "resource": {"pods", "services"}},
	},
	"nodelifecycle": {
		"Depth": {"name": {"node_lifecycle_controller", "node_lifecycle_controller_pods", "noexec_taint_node",
			"noexec_taint_pod", "cidrallocator_node"}},
		"Reconciles by controller and result": {"controller": {"node-lifecycle-controller", "taint-eviction-controller", "node-ipam-controller"}},
		"Pod ranges taken and freed":          {"clusterCIDR": {"198.51.100.0/24", "2001:db8:100::/56"}},
	},
	"namespace": {
		"Depth": {"name": {"namespace"}},
		"API group versions not answering discovery": {"last_discovery": {"none", "holds_objects", "holds_nothing"}},
	},
	"quota": {
		"Depth": {"name": {"resourcequota_primary", "resourcequota_priority"}},
		"Shard layout: Leases of another layout blocking": {"shards": {"2"}},
	},
	"pvbinder":  {"Depth": {"name": {"volumes", "claims"}}, "Volume operation errors": {"operation_name": {"delete"}}},
	"servicelb": {"Depth": {"name": {"service", "node", "ipaddresspool"}}},
	"overview": {
		"Replicas up": {"job": liveJobs}, "Secure port refusals (401, 403)": {"decision": {"unauthenticated", "forbidden"}},
		"Take-over: proven, and kube-controller-manager running the controllers": {"job": {"quota-controller"}},
		"Leader Migration phase by replica":                                      {"phase": {"off"}, "job": liveJobs},
		"Shard layouts: Leases of another layout blocking":                       {"binary": {"endpoints-controller", "quota-controller"}},
		"Shard spread by binary: max over mean objects":                          {"binary": {"endpoints-controller"}, "shards": {"2"}},
		"Shard filtering mode by binary and resource":                            {"binary": {"endpoints-controller"}, "shards": {"2"}},
		"Foreign writer episodes":                                                {"controller": {"endpoints-controller", "resourcequota-controller"}},
	},
	"*": {"Secure port: requests refused (401, 403)": {"decision": {"unauthenticated", "forbidden"}}},
}

// liveNoData are the panels that may show no data, by dashboard, and why: the same queries
// are proven on another dashboard.
var liveNoData = map[string]map[string]string{
	"quota": {
		"Objects per shard":                                        "make up shards endpoints-controller only (ENDPOINTS_SHARDS); the endpoints dashboard runs the same query",
		"Shard spread: max over mean objects":                      "make up shards endpoints-controller only; the endpoints dashboard runs the same query",
		"Largest namespace of each shard, and the mean of a shard": "make up shards endpoints-controller only; the endpoints dashboard runs the same queries",
		"Filtering mode by shard and resource":                     "make up shards endpoints-controller only; the endpoints dashboard runs the same query",
	},
}

// liveShards is the shard count dashboards-e2e.sh gives `make up` (ENDPOINTS_SHARDS): the
// sharding panels need shards that lead.
const liveShards = 2

// liveJobs are the binaries `make up` runs, each scraped as its own job.
var liveJobs = []string{"endpoints-controller", "namespace-controller", "nodelifecycle-controller",
	"pv-binder-controller", "quota-controller", "service-lb-controller"}

// TestDashboardsLive proves every dashboard against live data: a real Prometheus scrapes every
// binary `make up` runs (HTTPS, a ServiceAccount token bound to the chart's metrics-reader
// ClusterRole, as the chart's ServiceMonitor does), a workload exercises each controller, and
// every query of every panel, with the dashboard's variables resolved by their own queries,
// must return data; chosen panels must show the label values they exist for. Run by
// `make dashboards-e2e` (make up, this test, make down).
// Over 80 lines: one live setup in order (the chart's scraper RBAC, a take-over standby, Prometheus, the workload) that every dashboard's queries then run against.
func TestDashboardsLive(t *testing.T) {
	if os.Getenv(liveEnv) != "1" {
		t.Skipf("%s=1 runs it against `make up` (make dashboards-e2e)", liveEnv)
	}
	began := time.Now()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(root, ".local", "kubeconfig"))
	if err != nil {
		t.Fatalf("make up's kubeconfig: %v", err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	ports := controllerPorts(t, filepath.Join(root, ".local", "run", "ports.env"))
	// A job's processes: endpoints-controller-shard-I (ENDPOINTS_SHARDS) are one job's
	// instances, as a chart install's shards are one Service's endpoints.
	jobPorts := map[string][]int{}
	for name, p := range ports {
		job, _, _ := strings.Cut(name, "-shard-")
		jobPorts[job] = append(jobPorts[job], p)
	}
	for _, ps := range jobPorts {
		slices.Sort(ps)
	}
	if n := len(jobPorts["endpoints-controller"]); n != liveShards {
		t.Fatalf("make up runs endpoints-controller as %d process(es), want %d shards: the sharding panels need shards that lead (make up ENDPOINTS_SHARDS=%d; dashboards-e2e.sh starts it so)", n, liveShards, liveShards)
	}

	// What the chart sets up for a scraper: its metrics-reader ClusterRole, and its
	// ServiceMonitors' scheme, path and TLS settings.
	c, v := chart(t)
	args := []string{"--set", "serviceMonitor.enabled=true", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"}
	for _, alias := range v.Aliases() {
		args = append(args, "--set", "controllers."+alias+".enabled=true")
	}
	objs := render(t, c, "kcm-split", "kube-system", args...)
	var reader *rbacv1.ClusterRole
	monitors := 0
	insecure := false
	for _, o := range objs {
		switch {
		case o.Kind == "ClusterRole" && strings.HasSuffix(o.Name, "-metrics-reader"):
			reader = o.Typed.(*rbacv1.ClusterRole)
		case o.Kind == "ServiceMonitor":
			monitors++
			var sm struct {
				Spec struct {
					Endpoints []struct {
						Scheme, Path string
						TLSConfig    struct {
							InsecureSkipVerify bool `json:"insecureSkipVerify"`
						} `json:"tlsConfig"`
					} `json:"endpoints"`
				} `json:"spec"`
			}
			b, _ := json.Marshal(o.Raw)
			if err := json.Unmarshal(b, &sm); err != nil || len(sm.Spec.Endpoints) != 1 {
				t.Fatalf("ServiceMonitor %s: %v %+v", o.Name, err, sm)
			}
			ep := sm.Spec.Endpoints[0]
			if ep.Scheme != "https" || ep.Path != "/metrics" {
				t.Fatalf("ServiceMonitor %s scrapes %s %s; this test scrapes https /metrics", o.Name, ep.Scheme, ep.Path)
			}
			insecure = ep.TLSConfig.InsecureSkipVerify
		}
	}
	if reader == nil || monitors != len(liveJobs) {
		t.Fatalf("the chart rendered metrics-reader=%v and %d ServiceMonitors, want one per binary (%d)", reader != nil, monitors, len(liveJobs))
	}
	reader.ResourceVersion = ""
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, reader, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	monNS := "dashboards-e2e-monitoring"
	liveDo(t, func() error {
		_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: monNS}}, metav1.CreateOptions{})
		return err
	})
	for _, sa := range []string{"prometheus", "no-rights"} {
		liveDo(t, func() error {
			_, err := client.CoreV1().ServiceAccounts(monNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
			return err
		})
	}
	liveDo(t, func() error {
		_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "dashboards-e2e-prometheus"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: reader.Name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: monNS}},
		}, metav1.CreateOptions{})
		return err
	})
	token := func(sa string) string {
		tr, err := client.CoreV1().ServiceAccounts(monNS).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token("prometheus")), 0o600); err != nil {
		t.Fatal(err)
	}

	// The sources of the opt-in metrics (OptIn) that `make up` lacks, one more replica each of
	// the two sharded binaries, of another layout than `make up`'s: quota with --shards=2
	// beside the unsharded replica (whose Lease is layout 1), endpoints with liveShards+1
	// shards beside the liveShards shards. The other layout's Leases are held and fresh, so they
	// never campaign and never write (kcm_split_shard_layout_blocking_leases 1 and liveShards).
	// The quota one also has --take-over-from-kcm (kcm_split_takeover_*: waiting, not led).
	// The sharding panels' other metrics come from `make up`'s leading endpoints shards.
	extraPorts := map[string]int{}
	for _, x := range []struct {
		binary string
		shards int
		flags  []string
	}{
		{"quota-controller", 2, []string{"--take-over-from-kcm"}},
		{"endpoints-controller", liveShards + 1, nil},
	} {
		port := freePort(t)
		extraPorts[x.binary] = port
		extra := exec.CommandContext(ctx, filepath.Join(root, "bin", x.binary), append([]string{
			"--kubeconfig=" + filepath.Join(root, ".local", "kubeconfig"), "--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", port), fmt.Sprintf("--shards=%d", x.shards), "--shard-index=0"}, x.flags...)...)
		extraLog, err := os.Create(filepath.Join(root, ".local", "logs", x.binary+"-opt-in.log"))
		if err != nil {
			t.Fatal(err)
		}
		extra.Stdout, extra.Stderr = extraLog, extraLog
		extra.Env = append(os.Environ(), "KCM_SPLIT_LOG_FORMAT=console")
		if err := extra.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = extra.Process.Kill(); _ = extra.Wait(); _ = extraLog.Close() })
	}

	// Prometheus v3 with one job per binary, the labels prometheus-operator gives a
	// ServiceMonitor's targets, and a cluster label.
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\nscrape_configs:\n", scrapeInterval, scrapeInterval)
	targetCount := 0
	for _, job := range liveJobs {
		ps := jobPorts[job]
		if len(ps) == 0 {
			t.Fatalf("make up runs no %s (ports.env: %v)", job, ports)
		}
		if p, ok := extraPorts[job]; ok {
			ps = append(slices.Clone(ps), p)
		}
		var ts []string
		for _, p := range ps {
			ts = append(ts, fmt.Sprintf("'127.0.0.1:%d'", p))
		}
		targets := strings.Join(ts, ", ")
		targetCount += len(ps)
		fmt.Fprintf(&cfg, `- job_name: %s
  scheme: https
  metrics_path: /metrics
  authorization: {type: Bearer, credentials_file: %s}
  tls_config: {insecure_skip_verify: %t}
  static_configs:
  - targets: [%s]
    labels: {cluster: local, namespace: kube-system, service: %s, endpoint: https}
`, job, tokenFile, insecure, targets, job)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	promPort := freePort(t)
	prom := exec.CommandContext(ctx, filepath.Join(binDir(t, root), "prometheus"),
		"--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort), "--log.level=warn")
	promLog, err := os.Create(filepath.Join(root, ".local", "logs", "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	prom.Stdout, prom.Stderr = promLog, promLog
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Process.Kill(); _ = prom.Wait(); _ = promLog.Close() })
	api := &promAPI{base: fmt.Sprintf("http://127.0.0.1:%d", promPort)}
	promStart := time.Now()
	// Every target up, through the chart's authorization.
	poll(t, 90*time.Second, "every target up (.local/logs/prometheus.log)", func() (bool, string) {
		res, err := api.instant(`up`)
		if err != nil {
			return false, err.Error()
		}
		up := 0
		for _, s := range res {
			if s.value() == 1 {
				up++
			}
		}
		return up == targetCount, fmt.Sprintf("%d of %d targets up", up, targetCount)
	})

	workload(t, ctx, client, api, ports, token("no-rights"))
	workloadDone := time.Now()
	t.Logf("FIGURE workload: %.1fs", workloadDone.Sub(promStart).Seconds())
	// Rates need two scrapes after the last event, and the 10 s windows to cover it.
	time.Sleep(3 * scrapeInterval)

	files, err := filepath.Glob(filepath.Join(c.Dir, "dashboards", "*.json"))
	if err != nil || len(files) != len(liveJobs)+1 {
		t.Fatalf("dashboards: %v %v", files, err)
	}
	queries := 0
	for _, f := range files {
		queries += checkLiveDashboard(t, api, f, promStart, time.Now())
	}
	t.Logf("FIGURE dashboards: %d dashboards, %d queries evaluated; test %.1fs", len(files), queries, time.Since(began).Seconds())
}

// checkLiveDashboard resolves f's variables and evaluates every query of every panel over
// [start, end]; it returns the number of queries evaluated.
// Over 80 lines: a dashboard's variables must be resolved in order before its panels' queries, which substitute them.
func checkLiveDashboard(t *testing.T, api *promAPI, f string, start, end time.Time) int {
	t.Helper()
	name := strings.TrimSuffix(filepath.Base(f), ".json")
	raw, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels     []livePanel `json:"panels"`
		Templating struct {
			List []struct {
				Name, Type string
				Query      any  `json:"query"`
				Multi      bool `json:"multi"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	// Variables, in order, each by its own query (label_values(selector, label)); the
	// single-valued job of a controller dashboard must find exactly that binary.
	vars := map[string]string{}
	subst := func(s string) string {
		for k, v := range vars {
			s = strings.ReplaceAll(s, "$"+k, v)
		}
		return intervalVar.ReplaceAllString(s, rateWindow)
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		qs, _ := v.Query.(string)
		m := regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_]+)\)$`).FindStringSubmatch(qs)
		if m == nil {
			t.Errorf("%s variable %s: query %q is not label_values(selector, label)", name, v.Name, qs)
			return 0
		}
		checkMatchers(t, api, name, "variable "+v.Name, subst(m[1]), start, end)
		values, err := api.labelValues(subst(m[1]), m[2], start, end)
		if err != nil || len(values) == 0 {
			t.Errorf("%s variable %s: %s found no values (%v)", name, v.Name, subst(qs), err)
			return 0
		}
		if v.Name == "job" && !v.Multi && (len(values) != 1 || values[0] != jobOf(name)) {
			t.Errorf("%s variable job = %v, want exactly [%s]", name, values, jobOf(name))
		}
		vars[v.Name] = values[0]
		if v.Multi {
			vars[v.Name] = "(" + strings.Join(values, "|") + ")"
		}
	}
	n := 0
	titles := map[string]bool{}
	var walk func([]livePanel)
	walk = func(ps []livePanel) {
		for _, p := range ps {
			walk(p.Panels)
			titles[p.Title] = true
			if p.Type == "row" {
				continue
			}
			seen := map[string]map[string]bool{}
			for _, tg := range p.Targets {
				n++
				expr := subst(tg.Expr)
				series, err := api.rangeQuery(expr, start, end)
				if err != nil {
					t.Errorf("%s panel %q: %s: %v", name, p.Title, expr, err)
					continue
				}
				data := 0
				for _, s := range series {
					if s.hasData() {
						data++
						for l, v := range s.Metric {
							if seen[l] == nil {
								seen[l] = map[string]bool{}
							}
							seen[l][v] = true
						}
					}
				}
				if why, ok := liveNoData[name][p.Title]; data == 0 && !ok {
					t.Errorf("%s panel %q: no data (%d series, none with a number) from %s", name, p.Title, len(series), expr)
				} else if data == 0 {
					t.Logf("%s panel %q: no data, as expected: %s", name, p.Title, why)
				}
				checkMatchers(t, api, name, fmt.Sprintf("panel %q", p.Title), expr, start, end)
			}
			for _, exp := range []map[string][]string{liveExpect[name][p.Title], liveExpect["*"][p.Title]} {
				for label, want := range exp {
					for _, w := range want {
						if !seen[label][w] {
							t.Errorf("%s panel %q shows %s=%v, want %q among them", name, p.Title, label, keys(seen[label]), w)
						}
					}
				}
			}
		}
	}
	walk(d.Panels)
	for title := range liveNoData[name] {
		if !titles[title] {
			t.Errorf("%s: liveNoData names panel %q, which the dashboard does not have", name, title)
		}
	}
	return n
}

// checkMatchers (where is a panel or a variable): every literal label value a query filters on (=, or =~ a list of
// alternatives) is one the metric has under the query's other matchers, so a panel never
// filters on a controller, queue, decision or bucket that does not exist.
func checkMatchers(t *testing.T, api *promAPI, dash, where, expr string, start, end time.Time) {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s %s: %v", dash, where, err)
		return
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		for i, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName || m.Name == "job" || m.Name == "instance" || m.Name == "cluster" {
				continue
			}
			var want []string
			switch {
			case m.Type == labels.MatchEqual:
				want = []string{m.Value}
			case m.Type == labels.MatchRegexp && regexp.MustCompile(`^[a-zA-Z0-9_.+-]+(\|[a-zA-Z0-9_.+-]+)*$`).MatchString(m.Value):
				want = strings.Split(m.Value, "|")
			default:
				continue
			}
			others := slices.Delete(slices.Clone(vs.LabelMatchers), i, i+1)
			var sel []string
			for _, o := range others {
				sel = append(sel, o.String())
			}
			got, err := api.labelValues("{"+strings.Join(sel, ", ")+"}", m.Name, start, end)
			if err != nil {
				t.Errorf("%s %s: %v", dash, where, err)
				continue
			}
			missing := 0
			for _, w := range want {
				if !slices.Contains(got, w) {
					missing++
					// le: spellings of one bucket bound (Prometheus 3 writes 10.0, 2 wrote 10);
					// one of them is enough.
					if m.Name != labels.BucketLabel {
						t.Errorf("%s %s filters %s on %s=%q, which has only %v", dash, where, vs.Name, m.Name, w, got)
					}
				}
			}
			if m.Name == labels.BucketLabel && missing == len(want) {
				t.Errorf("%s %s filters %s on le %s, which has only %v", dash, where, vs.Name, m.Value, got)
			}
		}
		return nil
	})
}

type livePanel struct {
	Title   string      `json:"title"`
	Type    string      `json:"type"`
	Panels  []livePanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// jobOf is the job (binary) a controller dashboard is for.
func jobOf(dashboard string) string {
	for _, j := range liveJobs {
		if strings.HasPrefix(strings.ReplaceAll(j, "-", ""), strings.ReplaceAll(dashboard, "-", "")) {
			return j
		}
	}
	return "?"
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// workload exercises each controller, waiting for each final state.
// Over 80 lines: each controller's objects in one namespace, then their final states polled in the order timing needs (the paused zone within 50 s).
func workload(t *testing.T, ctx context.Context, client kubernetes.Interface, api *promAPI, ports map[string]int, noRights string) {
	t.Helper()
	ns := fmt.Sprintf("dash-%d", time.Now().UnixNano()%100000)
	liveDo(t, func() error {
		_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		return err
	})
	// Quota: counted before and after the Pods below.
	liveDo(t, func() error {
		_, err := client.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("20"),
				"count/configmaps": resource.MustParse("20")}}}, metav1.CreateOptions{})
		return err
	})
	// endpoints and endpointslice: a Deployment of 3 behind a Service.
	labelsWeb := map[string]string{"app": "web"}
	liveDo(t, func() error {
		_, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: appsv1.DeploymentSpec{Replicas: new(int32(3)), Selector: &metav1.LabelSelector{MatchLabels: labelsWeb},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labelsWeb},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx",
						Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}}}}}, metav1.CreateOptions{})
		return err
	})
	port := []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80)}}
	liveDo(t, func() error {
		_, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{Selector: labelsWeb, Ports: port}}, metav1.CreateOptions{})
		return err
	})
	// mirroring: custom Endpoints of a Service without a selector.
	liveDo(t, func() error {
		_, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "custom"},
			Spec: corev1.ServiceSpec{Ports: port}}, metav1.CreateOptions{})
		return err
	})
	liveDo(t, func() error {
		_, err := client.CoreV1().Endpoints(ns).Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "custom"},
			Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.10"}},
				Ports: []corev1.EndpointPort{{Name: "http", Port: 80}}}}}, metav1.CreateOptions{})
		return err
	})
	// service-lb: a LoadBalancer Service served from make up's demo pool.
	liveDo(t, func() error {
		_, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: labelsWeb, Ports: port}}, metav1.CreateOptions{})
		return err
	})
	// pv-binder: a hostPath PV (outside /tmp/hostpath_pv, so its deletion is refused) bound
	// to a claim; the claim deleted, the PV Released and its deletion failing.
	pvName := ns + "-pv"
	liveDo(t, func() error {
		_, err := client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName},
			Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: "dash-e2e",
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: "/var/empty/kcm-split-dashboards-e2e/" + ns}}}}, metav1.CreateOptions{})
		return err
	})
	liveDo(t, func() error {
		_, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: new("dash-e2e"), Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{})
		return err
	})
	// A claim no PV matches stays Pending (the unbound claims panel).
	liveDo(t, func() error {
		_, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "pending"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: new("dash-e2e-none"), Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{})
		return err
	})
	// nodelifecycle: Nodes kwok does not manage. Zone dash-full: one Node reporting NotReady
	// (tainted NoExecute at the normal rate, a Pod range from node IPAM) and a Pod on it
	// tolerating that for 1 s (taint eviction); the Node deleted at the end (its range
	// freed). Zone dash-partial: three NotReady and one Ready, a partial disruption that
	// pauses tainting there; its Nodes wait for Pod ranges (make up's /24 has four /26s).
	node := ns + "-node"
	newNode := func(name, zone string, ready corev1.ConditionStatus) {
		liveDo(t, func() error {
			_, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
				Labels: map[string]string{"topology.kubernetes.io/zone": zone}}}, metav1.CreateOptions{})
			return err
		})
		liveDo(t, func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				return setReady(ctx, client, name, ready)
			})
		})
	}
	newNode(node, "dash-full", corev1.ConditionFalse)
	poll(t, 60*time.Second, "Node "+node+" with a Pod range", func() (bool, string) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(n.Spec.PodCIDRs) > 0, "no podCIDRs"
	})
	for i := range 4 {
		status := corev1.ConditionFalse
		if i == 3 {
			status = corev1.ConditionTrue
		}
		newNode(fmt.Sprintf("%s-partial-%d", ns, i), "dash-partial", status)
	}
	// The Ready Node turns Unknown after --node-monitor-grace-period (50 s): look now.
	poll(t, 40*time.Second, "tainting paused in zone dash-partial", func() (bool, string) {
		res, err := api.instant(`kcm_split_nodelifecycle_evictions_paused{zone=~".*dash-partial"}`)
		if err != nil {
			return false, err.Error()
		}
		return len(res) == 1 && res[0].value() == 1, fmt.Sprintf("%d series", len(res))
	})
	liveDo(t, func() error {
		_, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "on-notready"},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "nginx"}},
				Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists,
					Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(1))}}}}, metav1.CreateOptions{})
		return err
	})
	// The secure port refuses a request without a token (401) and one whose token lacks the
	// metrics-reader rights (403), on every binary.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the binaries' self-signed certificates, as the chart's ServiceMonitor
	for job, p := range ports {
		for _, tok := range []string{"", noRights} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", p), nil)
			want := http.StatusUnauthorized
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
				want = http.StatusForbidden
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", job, err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != want {
				t.Fatalf("%s /metrics with token %t: %d, want %d", job, tok != "", resp.StatusCode, want)
			}
		}
	}

	// Final states, each bounded.
	poll(t, 120*time.Second, "Endpoints web with 3 addresses", func() (bool, string) {
		ep, err := client.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, s := range ep.Subsets {
			n += len(s.Addresses)
		}
		return n == 3, fmt.Sprintf("%d addresses", n)
	})
	// The endpointslice controller's per-sync histograms get their first sample during the
	// workload, and rate() cannot see a series' first sample: one more sync, after Prometheus
	// has scraped the series twice, gives the "added and removed per sync" panels a rate.
	time.Sleep(2*scrapeInterval + time.Second)
	liveDo(t, func() error {
		_, err := client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{})
		return err
	})
	poll(t, 120*time.Second, "Endpoints web with 4 addresses after the scale-up", func() (bool, string) {
		ep, err := client.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, s := range ep.Subsets {
			n += len(s.Addresses)
		}
		return n == 4, fmt.Sprintf("%d addresses", n)
	})
	poll(t, 60*time.Second, "a mirrored EndpointSlice of custom", func() (bool, string) {
		l, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=custom"})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 1, fmt.Sprintf("%d slices", len(l.Items))
	})
	poll(t, 60*time.Second, "Service lb with an address", func() (bool, string) {
		s, err := client.CoreV1().Services(ns).Get(ctx, "lb", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(s.Status.LoadBalancer.Ingress) > 0, fmt.Sprintf("%v", s.Status.LoadBalancer.Ingress)
	})
	poll(t, 60*time.Second, "quota q counting 3 Pods", func() (bool, string) {
		q, err := client.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		used := q.Status.Used[corev1.ResourcePods]
		return used.Value() >= 3, "pods used " + used.String()
	})
	poll(t, 60*time.Second, "claim Bound", func() (bool, string) {
		c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return c.Status.Phase == corev1.ClaimBound, string(c.Status.Phase)
	})
	liveDo(t, func() error {
		return client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "claim", metav1.DeleteOptions{})
	})
	poll(t, 60*time.Second, "PV Failed (its deletion refused)", func() (bool, string) {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pv.Status.Phase == corev1.VolumeFailed, string(pv.Status.Phase)
	})
	poll(t, 60*time.Second, "NotReady Node tainted NoExecute with a Pod range", func() (bool, string) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == corev1.TaintNodeNotReady && t.Effect == corev1.TaintEffectNoExecute
		})
		return tainted && len(n.Spec.PodCIDRs) > 0, fmt.Sprintf("taints %v, podCIDRs %v", n.Spec.Taints, n.Spec.PodCIDRs)
	})
	poll(t, 60*time.Second, "Pod on the NotReady Node evicted", func() (bool, string) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "on-notready", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return p.DeletionTimestamp != nil, "not deleted"
	})
	liveDo(t, func() error { return client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}) })
	poll(t, 60*time.Second, "a Pod range freed and given to a waiting Node", func() (bool, string) {
		l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "topology.kubernetes.io/zone=dash-partial"})
		if err != nil {
			return false, err.Error()
		}
		with := 0
		for _, n := range l.Items {
			if len(n.Spec.PodCIDRs) > 0 {
				with++
			}
		}
		return with == 1, fmt.Sprintf("%d of the zone's Nodes have a range", with)
	})
	// namespace: namespaces with content, deleted one after the other: a histogram series is
	// born with its first observation, which rate() cannot see, so the second one shows.
	for i := range 2 {
		doomed := fmt.Sprintf("%s-deleted-%d", ns, i)
		liveDo(t, func() error {
			_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: doomed}}, metav1.CreateOptions{})
			return err
		})
		liveDo(t, func() error {
			_, err := client.CoreV1().ConfigMaps(doomed).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{})
			return err
		})
		time.Sleep(2 * scrapeInterval) // scraped between the two
		liveDo(t, func() error { return client.CoreV1().Namespaces().Delete(ctx, doomed, metav1.DeleteOptions{}) })
		poll(t, 90*time.Second, "namespace "+doomed+" gone", func() (bool, string) {
			_, err := client.CoreV1().Namespaces().Get(ctx, doomed, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
		})
	}
}

// setReady sets Node name's Ready condition, heartbeat now.
func setReady(ctx context.Context, client kubernetes.Interface, name string, ready corev1.ConditionStatus) error {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "DashboardsE2E",
		LastHeartbeatTime: now, LastTransitionTime: now}}
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// liveDo runs an API call, failing t on an error other than AlreadyExists.
func liveDo(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// poll calls cond every second until it holds, failing t with cond's last word after timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, timeout, true, func(context.Context) (bool, error) {
		var ok bool
		ok, last = cond()
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not after %s: %s", what, timeout, last)
	}
	t.Logf("FIGURE %s: %.1fs", what, time.Since(start).Seconds())
}

// controllerPorts reads CONTROLLER_PORTS='name=port ...' from make up's ports.env.
func controllerPorts(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("is make up running? %v", err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CONTROLLER_PORTS=")
		if !ok {
			continue
		}
		for _, e := range strings.Fields(strings.Trim(v, "'")) {
			name, p, _ := strings.Cut(e, "=")
			n, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("ports.env: %q", e)
			}
			out[name] = n
		}
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// binDir is where the tools are: KCM_SPLIT_BIN_DIR, else bin/.
func binDir(t *testing.T, root string) string {
	t.Helper()
	if d := os.Getenv("KCM_SPLIT_BIN_DIR"); d != "" {
		return d
	}
	return filepath.Join(root, "bin")
}

// promAPI is the little of Prometheus' HTTP API this test needs. (Prometheus' own client
// package pins a client-go this module does not use; three GETs do not need it.)
type promAPI struct{ base string }

type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

func (s promSeries) value() float64 {
	if len(s.Value) != 2 {
		return math.NaN()
	}
	f, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
	return f
}

// hasData: a sample that is a number (histogram_quantile of no observations is NaN).
func (s promSeries) hasData() bool {
	for _, v := range s.Values {
		if f, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return true
		}
	}
	return false
}

func (a *promAPI) get(path string, params url.Values, out any) error {
	resp, err := http.Get(a.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %s", path, b)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s", path, r.Error)
	}
	return json.Unmarshal(r.Data, out)
}

func (a *promAPI) instant(expr string) ([]promSeries, error) {
	var d struct {
		Result []promSeries `json:"result"`
	}
	err := a.get("/api/v1/query", url.Values{"query": {expr}}, &d)
	return d.Result, err
}

func (a *promAPI) rangeQuery(expr string, start, end time.Time) ([]promSeries, error) {
	var d struct {
		Result []promSeries `json:"result"`
	}
	err := a.get("/api/v1/query_range", url.Values{"query": {expr}, "start": {ts(start)}, "end": {ts(end)},
		"step": {strconv.Itoa(int(scrapeInterval.Seconds()))}}, &d)
	return d.Result, err
}

// labelValues are the values label has among the series selector matches in [start, end].
func (a *promAPI) labelValues(selector, label string, start, end time.Time) ([]string, error) {
	var out []string
	err := a.get("/api/v1/label/"+label+"/values", url.Values{"match[]": {selector}, "start": {ts(start)}, "end": {ts(end)}}, &out)
	sort.Strings(out)
	return out, err
}

func ts(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }
