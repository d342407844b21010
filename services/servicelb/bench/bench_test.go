// Package bench measures service-lb-controller on a real etcd + kube-apiserver
// (shared/testenv): 500 LoadBalancer Services created at 20/s, create-to-address latency,
// writes per Service, then a restart that must neither move an address nor write. README.md
// explains each number. Timings are reported, never asserted; the benchmark fails only when
// the controller is functionally broken (a Service never gets an address, two Services get
// one address, a restart moves one, the process dies).
//
// Upstream kube-controller-manager is not run: without a cloud provider its service
// controller does not assign addresses at all, so there is nothing to compare with.
package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/shared/benchkit"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

const (
	numServices = 500
	// createRate is the issue's: 20 Services a second.
	createInterval = 50 * time.Millisecond
	floorSamples   = 100
	quietSettle    = 3 * time.Second
	serveTimeout   = 3 * time.Minute
	benchNS        = "bench"
	sentinelNS     = "bench-sentinel"
	userAgent      = "service-lb-controller/"
	// poolRange is RFC 2544's benchmarking range: 1,024 addresses for 500 Services.
	poolRange = "198.18.0.0/22"
	crdDir    = "../../../charts/kcm-split/crds"
)

type result struct {
	floor        []time.Duration
	latencies    []time.Duration
	svcWrites    int
	eventWrites  int
	poolWrites   int
	restartSync  time.Duration
	restartW     int
	restartMoved int
	cpu          time.Duration
}

// variant is one way to run the controller.
type variant struct {
	name string
	args []string
}

var variants = []variant{
	// The binary's defaults: one worker (upstream's), its own 100 QPS / 200 burst budget.
	{name: "defaults"},
	// The shared client default of every kcm-split binary and of upstream KCM, for contrast.
	{name: "qps-20", args: []string{"--kube-api-qps=20", "--kube-api-burst=30"}},
}

func BenchmarkServiceLB(b *testing.B) {
	r := benchkit.RunSides(b, variants, func(v variant) string { return v.name }, runScenario, (*result).report)
	printTable(os.Stdout, r)
}

func (r *result) report(b *testing.B) {
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.latencies, 50)), "p50-ms")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.latencies, 99)), "p99-ms")
	b.ReportMetric(float64(r.svcWrites)/numServices, "writes/svc")
	b.ReportMetric(float64(r.restartW), "restart-writes")
}

// Over 80 lines: one benchmark scenario (start, create, measure, restart), in order; the restart phase compares each Service's address with those taken after the create phase, on the same control plane.
func runScenario(b *testing.B, v variant) *result {
	logf := benchkit.Progress(v.name)
	bin := benchkit.BuildShipped(b, "github.com/kcm-split/kcm-split/services/servicelb/cmd/service-lb-controller")
	env := benchkit.ControlPlane(b)
	if err := testenv.InstallCRDs(env.Config, crdDir, v1alpha1.GroupVersionResource); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := benchkit.Client(b, env.Config, "kcm-split-bench/fixtures")
	benchkit.CreateNamespaces(ctx, b, client, benchNS, sentinelNS)
	// One node, so the controller has a node set (no UnAvailableLoadBalancer events).
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	pools := v1alpha1.NewClient(dyn)
	if _, err := pools.Create(ctx, &v1alpha1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec:       v1alpha1.IPAddressPoolSpec{Addresses: []string{poolRange}},
	}); err != nil {
		b.Fatal(err)
	}

	// The watcher: when each Service first shows an address.
	w := newWatcher(ctx, b, benchkit.Client(b, env.Config, "kcm-split-bench/watch"))
	r := &result{}
	r.floor = measureFloor(b, ctx, client, w)
	logf("floor p50 %s p99 %s", benchkit.MS(benchkit.Percentile(r.floor, 50)), benchkit.MS(benchkit.Percentile(r.floor, 99)))

	proc := start(b, env, bin, v.args...)
	logf("controller leading and synced")

	// 500 Services at 20/s, each timed from issuing its Create to the watcher seeing an
	// address.
	tick := time.NewTicker(createInterval)
	var wg sync.WaitGroup
	for i := range numServices {
		<-tick.C
		wg.Go(func() {
			name := fmt.Sprintf("svc-%03d", i)
			w.created(benchNS+"/"+name, time.Now())
			if _, err := client.CoreV1().Services(benchNS).Create(ctx, lbService(benchNS, name), metav1.CreateOptions{}); err != nil {
				b.Errorf("creating %s: %v", name, err)
			}
		})
	}
	tick.Stop()
	wg.Wait()
	logf("created %d Services", numServices)
	if err := w.waitAll(benchNS, numServices, serveTimeout); err != nil {
		b.Fatalf("%v; controller log:\n%s", err, proc.Tail(30))
	}
	r.latencies = w.latencies(benchNS)
	logf("all served: p50 %s p99 %s max %s", benchkit.MS(benchkit.Percentile(r.latencies, 50)), benchkit.MS(benchkit.Percentile(r.latencies, 99)), benchkit.MS(benchkit.Percentile(r.latencies, 100)))
	time.Sleep(quietSettle)
	addrs := checkUnique(b, ctx, client)
	r.svcWrites = countWrites(b, env, "services", benchNS)
	r.eventWrites = countWrites(b, env, "events", benchNS)
	r.poolWrites = countWrites(b, env, "ipaddresspools", "")
	r.cpu = proc.CPU()

	// Restart: a new process must restore every assignment before touching anything.
	if !proc.Shutdown() {
		b.FailNow()
	}
	before := countWrites(b, env, "services", benchNS)
	restart := time.Now()
	proc = start(b, env, bin, v.args...)
	w.created(sentinelNS+"/sentinel", time.Now())
	if _, err := client.CoreV1().Services(sentinelNS).Create(ctx, lbService(sentinelNS, "sentinel"), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := w.waitAll(sentinelNS, 1, serveTimeout); err != nil {
		b.Fatalf("sentinel: %v", err)
	}
	r.restartSync = time.Since(restart)
	time.Sleep(quietSettle)
	r.restartW = countWrites(b, env, "services", benchNS) - before
	after := checkUnique(b, ctx, client)
	for k, a := range addrs {
		if after[k] != a {
			r.restartMoved++
		}
	}
	if r.restartMoved > 0 {
		b.Fatalf("%d Services changed address across the restart", r.restartMoved)
	}
	logf("restart: sentinel served in %s, %d writes to the %d Services", benchkit.MS(r.restartSync), r.restartW, numServices)
	proc.Shutdown()
	return r
}

// ---- fixtures ----

func lbService(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
}

// measureFloor times, before the controller runs, a Service status write from its issue
// until the watcher sees it: one write-and-observe hop. Create-to-address takes at least
// three (the create, then the controller's finalizer and status patches).
func measureFloor(b *testing.B, ctx context.Context, c kubernetes.Interface, w *watcher) []time.Duration {
	b.Helper()
	var out []time.Duration
	for i := range floorSamples {
		name := fmt.Sprintf("floor-%03d", i)
		s, err := c.CoreV1().Services(sentinelNS).Create(ctx, lbService(sentinelNS, name), metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("203.0.113.%d", i+1)}}
		w.created(sentinelNS+"/"+name, time.Now())
		if _, err := c.CoreV1().Services(sentinelNS).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := w.waitOne(sentinelNS+"/"+name, 30*time.Second); err != nil {
			b.Fatal(err)
		}
		out = append(out, w.latency(sentinelNS+"/"+name))
		if err := c.CoreV1().Services(sentinelNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	w.reset(sentinelNS)
	return out
}

// checkUnique reads every Service's address and fails on a duplicate.
func checkUnique(b *testing.B, ctx context.Context, c kubernetes.Interface) map[string]string {
	b.Helper()
	list, err := c.CoreV1().Services(benchNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]string{}
	owner := map[string]string{}
	for _, s := range list.Items {
		if len(s.Status.LoadBalancer.Ingress) != 1 {
			b.Fatalf("%s has %d addresses", s.Name, len(s.Status.LoadBalancer.Ingress))
		}
		ip := s.Status.LoadBalancer.Ingress[0].IP
		if o, dup := owner[ip]; dup {
			b.Fatalf("%s given to both %s and %s", ip, o, s.Name)
		}
		owner[ip] = s.Name
		out[s.Name] = ip
	}
	return out
}

// ---- watcher ----

type watcher struct {
	mu      sync.Mutex
	cond    *sync.Cond
	start   map[string]time.Time
	served  map[string]time.Time
	counted map[string]int // namespace -> served Services
}

func newWatcher(ctx context.Context, b *testing.B, c kubernetes.Interface) *watcher {
	b.Helper()
	w := &watcher{start: map[string]time.Time{}, served: map[string]time.Time{}, counted: map[string]int{}}
	w.cond = sync.NewCond(&w.mu)
	see := func(obj any, deleted bool) {
		s, ok := obj.(*corev1.Service)
		if deleted || !ok || len(s.Status.LoadBalancer.Ingress) == 0 {
			return
		}
		now := time.Now()
		key := s.Namespace + "/" + s.Name
		w.mu.Lock()
		if _, done := w.served[key]; !done {
			w.served[key] = now
			w.counted[s.Namespace]++
			w.cond.Broadcast()
		}
		w.mu.Unlock()
	}
	benchkit.Inform(ctx, b, c, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Services().Informer()
	}, see)
	go func() { <-ctx.Done(); w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() }()
	return w
}

// created records when a Service's create (or status write) is issued: latencies cover the
// whole chain, the fixture's own request included.
func (w *watcher) created(key string, t time.Time) {
	w.mu.Lock()
	w.start[key] = t
	w.mu.Unlock()
}

func (w *watcher) latency(key string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(0, w.served[key].Sub(w.start[key]))
}

func (w *watcher) latencies(ns string) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for k, t := range w.served {
		if strings.HasPrefix(k, ns+"/") {
			out = append(out, max(0, t.Sub(w.start[k])))
		}
	}
	return out
}

func (w *watcher) reset(ns string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.served {
		if strings.HasPrefix(k, ns+"/") {
			delete(w.served, k)
			delete(w.start, k)
		}
	}
	w.counted[ns] = 0
}

func (w *watcher) waitOne(key string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(context.Background(), time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.served[key]
		return ok, nil
	})
}

func (w *watcher) waitAll(ns string, n int, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.counted[ns] >= n, nil
	})
	if err != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		return fmt.Errorf("only %d of %d Services in %s got an address", w.counted[ns], n, ns)
	}
	return nil
}

// ---- plumbing ----

// start runs the controller with its defaults and args, and waits until it is ready.
func start(b *testing.B, env *testenv.Env, bin string, args ...string) *benchkit.Process {
	b.Helper()
	args, url, err := benchkit.OursArgs(env.Kubeconfig, args...)
	if err != nil {
		b.Fatal(err)
	}
	p := benchkit.Start(b, "service-lb-controller", bin, args...)
	p.WaitUntil(time.Minute, "/readyz", func() bool {
		code, _ := benchkit.Get(url + "/readyz")
		return code == http.StatusOK
	})
	return p
}

// countWrites counts the controller's writes to resource (in ns, or anywhere when ns is
// empty) from the audit log.
func countWrites(b *testing.B, env *testenv.Env, resource, ns string) int {
	b.Helper()
	filters := []func(testenv.AuditEvent) bool{testenv.ByUserAgentPrefix(userAgent, resource)}
	if ns != "" {
		filters = append(filters, benchkit.InNamespace(ns))
	}
	return benchkit.CountWrites(b, env, filters...)
}

// ---- reporting ----

// printTable prints one column per variant; results are in the order of variants, nil where
// skipped.
func printTable(w io.Writer, results []*result) {
	fmt.Fprintf(w, "\nservice-lb-controller: %d LoadBalancer Services created at %.0f/s\n", numServices, float64(time.Second)/float64(createInterval))
	lines := []benchkit.Line[result]{
		{Name: "floor (one write -> watcher) p50/p99", Cell: func(r *result) string {
			return benchkit.MS(benchkit.Percentile(r.floor, 50)) + " / " + benchkit.MS(benchkit.Percentile(r.floor, 99))
		}},
		{Name: "create -> address p50", Cell: func(r *result) string { return benchkit.MS(benchkit.Percentile(r.latencies, 50)) }},
		{Name: "create -> address p90", Cell: func(r *result) string { return benchkit.MS(benchkit.Percentile(r.latencies, 90)) }},
		{Name: "create -> address p99 (target <= 1s)", Cell: func(r *result) string { return benchkit.MS(benchkit.Percentile(r.latencies, 99)) }},
		{Name: "create -> address max", Cell: func(r *result) string { return benchkit.MS(benchkit.Percentile(r.latencies, 100)) }},
		{Name: "Service writes per Service (target <= 2)", Cell: func(r *result) string { return fmt.Sprintf("%.2f", float64(r.svcWrites)/numServices) }},
		{Name: "Event writes per Service (at the end)", Cell: func(r *result) string { return fmt.Sprintf("%.2f", float64(r.eventWrites)/numServices) }},
		{Name: "IPAddressPool status writes (total)", Cell: func(r *result) string { return fmt.Sprint(r.poolWrites) }},
		{Name: "controller CPU for the run", Cell: func(r *result) string { return r.cpu.Round(time.Millisecond).String() }},
		{Name: "restart: sentinel served after", Cell: func(r *result) string { return benchkit.MS(r.restartSync) }},
		{Name: "restart: writes to the 500 Services (want 0)", Cell: func(r *result) string { return fmt.Sprint(r.restartW) }},
		{Name: "restart: addresses moved (want 0)", Cell: func(r *result) string { return fmt.Sprint(r.restartMoved) }},
	}
	headings := make([]string, len(variants))
	for i, v := range variants {
		headings[i] = v.name
	}
	fmt.Fprintln(w)
	benchkit.Lines(headings, results, lines...).Write(w)
}
