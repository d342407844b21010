// Package bench compares the quota-controller binary with upstream kube-controller-manager
// running only its resourcequota controller, on the same scenario against a real etcd +
// kube-apiserver (shared/testenv), and prints a side-by-side table. README.md explains each
// number. Timings are reported, never asserted; the benchmark fails only when a controller is
// functionally broken (a quota never converges, a process dies, no writes are audited).
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Scenario size and pacing, fixed so that runs compare.
const (
	numNamespaces    = 200
	podsPerNamespace = 20
	// deletesPerPhase Pods are deleted in each phase, round-robin over the namespaces.
	deletesPerPhase = 400
	floorSamples    = 200
	createWorkers   = 16
	// deletePause keeps the delete rate (and so the controller's writes) at about 13/s, under
	// both controllers' default client QPS (20/s): latency measures the controller, not its
	// client-side rate limiter.
	deletePause = 75 * time.Millisecond
	floorPause  = 10 * time.Millisecond
	idleSettle  = 5 * time.Second
	quietSettle = 2 * time.Second

	coldSyncTimeout = 3 * time.Minute
	deleteTimeout   = 30 * time.Second
	stopTimeout     = 30 * time.Second

	nsPrefix   = "bench-"
	floorNS    = "floor"
	sentinelNS = "sentinel"
	quotaName  = "compute"

	concurrentSyncs = "5"
	// quietPeriod is upstream's default: no full recalculation during phase 1.
	quietPeriod = "5m"
	// busyPeriod makes phase 2 a full recalculation of all 200 quotas every second, so that
	// every delete lands during or right after one.
	busyPeriod = "1s"
)

// controllerUnderTest is one side of the comparison.
type controllerUnderTest struct {
	name      string
	userAgent string
	binary    func(b *testing.B) (string, error)
	args      func(kubeconfig, syncPeriod string) ([]string, error)
}

var ours = controllerUnderTest{
	name:      "quota-controller",
	userAgent: "quota-controller/",
	binary:    buildOurs,
	args: func(kubeconfig, syncPeriod string) ([]string, error) {
		port, err := testenv.FreePort()
		if err != nil {
			return nil, err
		}
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
			"--concurrent-resource-quota-syncs=" + concurrentSyncs,
			"--resource-quota-sync-period=" + syncPeriod,
			"--log-level=info",
		}, nil
	},
}

var upstream = controllerUnderTest{
	name:      "kube-controller-manager",
	userAgent: "kube-controller-manager/",
	binary: func(*testing.B) (string, error) {
		dir, err := testenv.FindBinDir()
		if err != nil {
			return "", err
		}
		bin := filepath.Join(dir, "kube-controller-manager")
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s not found: run `make tools`", bin)
		}
		return bin, nil
	},
	args: func(kubeconfig, syncPeriod string) ([]string, error) {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=resourcequota-controller",
			"--leader-elect=false",
			"--use-service-account-credentials=false",
			"--secure-port=0",
			"--concurrent-resource-quota-syncs=" + concurrentSyncs,
			"--resource-quota-sync-period=" + syncPeriod,
			"--v=1",
		}, nil
	},
}

func BenchmarkQuota(b *testing.B) {
	results := map[string]*result{}
	for _, c := range []controllerUnderTest{ours, upstream} {
		b.Run(c.name, func(b *testing.B) {
			r := results[c.name]
			if r == nil {
				r = runScenario(b, c)
				results[c.name] = r
			}
			r.report(b)
		})
	}
	printTable(os.Stdout, results[ours.name], results[upstream.name])
}

// result holds everything one scenario measured.
type result struct {
	floor         []time.Duration
	setup         time.Duration
	coldSync      time.Duration
	coldWrites    int
	coldCPU       time.Duration
	idleRSS       int64
	quiet         []time.Duration // phase 1: delete -> status.used, no full recalculation
	quietWrites   int
	quietCPU      time.Duration
	busy          []time.Duration // phase 2: the same, with a full recalculation every second
	busyWrites    int
	idleAnon      int64 // RssAnon at idle: heap and runtime, without the binary's file pages
	loadedRSS     int64 // max VmRSS sampled during phase 1
	failed        int   // refused writes (conflicts) over the whole run
	restartSync   time.Duration
	restartW      int
	busyResyncCPU time.Duration
}

func ns(i int) string { return fmt.Sprintf("%s%03d", nsPrefix, i) }

func runScenario(b *testing.B, c controllerUnderTest) *result {
	logf := progress(c.name)
	bin, err := c.binary(b)
	if err != nil {
		b.Skipf("%s cannot run: %v", c.name, err)
	}
	start := time.Now()
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		b.Fatalf("starting the control plane: %v", err)
	}
	defer env.Stop()
	logf("control plane up in %s", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := newClient(b, env.Config, "kcm-split-bench/fixtures")
	watchClient := newClient(b, env.Config, "kcm-split-bench/watch")
	r := &result{}

	quotas := newObserver[*corev1.ResourceQuota](ctx, b, watchClient, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().ResourceQuotas().Informer()
	})

	// 1. Floor: a quota status write seen by a watcher, the one hop the controller makes after
	// it learns of a delete.
	r.floor = measureFloor(ctx, b, client, quotas)
	logf("floor: p50 %s p99 %s", ms(percentile(r.floor, 50)), ms(percentile(r.floor, 99)))

	// 2. Fixtures: Pods first, then the quotas (so admission lets the Pods in without a
	// controller), then the controller's cold sync computes every quota from scratch.
	start = time.Now()
	createFixtures(ctx, b, client)
	r.setup = time.Since(start)
	logf("created %d namespaces x %d Pods + 1 quota in %s", numNamespaces, podsPerNamespace, r.setup.Round(time.Millisecond))

	remaining := make([]int, numNamespaces)
	for i := range remaining {
		remaining[i] = podsPerNamespace
	}
	converged := quotas.whenAll(func(objs map[string]*corev1.ResourceQuota) bool {
		for i := range numNamespaces {
			rq := objs[ns(i)+"/"+quotaName]
			if rq == nil || !usedPods(rq, podsPerNamespace) {
				return false
			}
		}
		return true
	})
	proc := startController(b, c, bin, env.Kubeconfig, quietPeriod)
	at := proc.await(b, converged, coldSyncTimeout, "every quota's used pods after the cold sync")
	r.coldSync = at.Sub(proc.started)
	logf("cold sync: %s", r.coldSync.Round(time.Millisecond))
	time.Sleep(idleSettle)
	r.idleRSS, _ = proc.memory(b)
	r.idleAnon = proc.anonRSS(b)
	r.coldCPU = proc.cpu(b)
	r.coldWrites = countWrites(b, env, c.userAgent)
	if r.coldWrites == 0 {
		b.Fatalf("the audit log holds no quota writes by user agent %q although the quotas converged", c.userAgent)
	}
	logf("idle: rss %s, %d quota writes", mib(r.idleRSS), r.coldWrites)

	// 3. Phase 1: deletes, no full recalculation.
	next := 0 // the next Pod to delete, over all namespaces
	before := countWrites(b, env, c.userAgent)
	cpuBefore := proc.cpu(b)
	stopSampling := proc.sampleRSS(&r.loadedRSS)
	r.quiet = deletes(ctx, b, client, quotas, proc, remaining, &next)
	stopSampling()
	time.Sleep(quietSettle)
	r.quietCPU = proc.cpu(b) - cpuBefore
	r.quietWrites = countWrites(b, env, c.userAgent) - before
	logf("quiet deletes: p50 %s p99 %s, %d writes", ms(percentile(r.quiet, 50)), ms(percentile(r.quiet, 99)), r.quietWrites)

	// 4. Warm restart with a full recalculation every second: the restart itself must not
	// write (nothing changed), then phase 2 measures deletes during recalculations.
	before = countWrites(b, env, c.userAgent)
	proc.stop(b)
	proc = startController(b, c, bin, env.Kubeconfig, busyPeriod)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sentinelNS}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	sentinel := quotas.when(sentinelNS+"/"+quotaName, func(rq *corev1.ResourceQuota) bool { return usedPods(rq, 0) })
	if _, err := client.CoreV1().ResourceQuotas(sentinelNS).Create(ctx, makeQuota(sentinelNS), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	at = proc.await(b, sentinel, coldSyncTimeout, "the sentinel quota's status after the restart")
	r.restartSync = at.Sub(proc.started)
	time.Sleep(quietSettle)
	r.restartW = countWrites(b, env, c.userAgent) - before - 1 // the sentinel's own write
	logf("warm restart: sentinel synced after %s, %d writes to unchanged quotas", r.restartSync.Round(time.Millisecond), r.restartW)

	before = countWrites(b, env, c.userAgent)
	cpuBefore = proc.cpu(b)
	r.busy = deletes(ctx, b, client, quotas, proc, remaining, &next)
	time.Sleep(quietSettle)
	r.busyResyncCPU = proc.cpu(b) - cpuBefore
	r.busyWrites = countWrites(b, env, c.userAgent) - before
	logf("deletes during full recalculations: p50 %s p99 %s, %d writes", ms(percentile(r.busy, 50)), ms(percentile(r.busy, 99)), r.busyWrites)
	proc.stop(b)
	r.failed = countFailedWrites(b, env, c.userAgent)
	return r
}

func usedPods(rq *corev1.ResourceQuota, n int) bool {
	q, ok := rq.Status.Used[corev1.ResourcePods]
	return ok && q.Value() == int64(n)
}

// deletes deletes deletesPerPhase Pods, one at a time, and times the Delete response -> a
// watcher sees the quota's used pods drop. The controller learns of the delete about when the
// response arrives, so this is its reaction time plus one write-and-observe hop (the floor).
func deletes(ctx context.Context, b *testing.B, client kubernetes.Interface, quotas *observer[*corev1.ResourceQuota], proc *process, remaining []int, next *int) []time.Duration {
	b.Helper()
	out := make([]time.Duration, 0, deletesPerPhase)
	for range deletesPerPhase {
		i := *next % numNamespaces
		p := podsPerNamespace - remaining[i]
		*next++
		remaining[i]--
		want := remaining[i]
		seen := quotas.when(ns(i)+"/"+quotaName, func(rq *corev1.ResourceQuota) bool { return usedPods(rq, want) })
		zero := int64(0)
		if err := client.CoreV1().Pods(ns(i)).Delete(ctx, podName(p), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			b.Fatalf("deleting %s/%s: %v", ns(i), podName(p), err)
		}
		done := time.Now()
		at := proc.await(b, seen, deleteTimeout, fmt.Sprintf("quota %s/%s used pods = %d", ns(i), quotaName, want))
		out = append(out, nonNegative(at.Sub(done)))
		time.Sleep(deletePause)
	}
	return out
}

// measureFloor times quota status writes issued -> seen by the watcher.
func measureFloor(ctx context.Context, b *testing.B, client kubernetes.Interface, quotas *observer[*corev1.ResourceQuota]) []time.Duration {
	b.Helper()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNS}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	rq, err := client.CoreV1().ResourceQuotas(floorNS).Create(ctx, makeQuota(floorNS), metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	out := make([]time.Duration, 0, floorSamples)
	for i := range floorSamples {
		next := rq.DeepCopy()
		next.Status = corev1.ResourceQuotaStatus{Hard: next.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(i%50), resource.DecimalSI)}}
		want := i % 50
		seen := quotas.when(floorNS+"/"+quotaName, func(rq *corev1.ResourceQuota) bool {
			return usedPods(rq, want) && rq.ResourceVersion != next.ResourceVersion
		})
		issued := time.Now()
		rq, err = client.CoreV1().ResourceQuotas(floorNS).UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			b.Fatalf("floor: %v", err)
		}
		select {
		case at := <-seen:
			out = append(out, at.Sub(issued))
		case <-time.After(deleteTimeout):
			b.Fatal("floor: the watcher never saw the quota status")
		}
		time.Sleep(floorPause)
	}
	return out
}

func podName(i int) string { return fmt.Sprintf("pod-%02d", i) }

func makeQuota(namespace string) *corev1.ResourceQuota {
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: quotaName},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePods:           resource.MustParse("100"),
			corev1.ResourceRequestsCPU:    resource.MustParse("100"),
			corev1.ResourceRequestsMemory: resource.MustParse("100Gi"),
		}},
	}
}

func makePod(namespace string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: podName(i)},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{
				Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
				}},
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func createFixtures(ctx context.Context, b *testing.B, client kubernetes.Interface) {
	b.Helper()
	if err := parallel(ctx, numNamespaces, createWorkers, func(ctx context.Context, i int) error {
		_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns(i)}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating namespaces: %v", err)
	}
	if err := parallel(ctx, numNamespaces*podsPerNamespace, createWorkers, func(ctx context.Context, k int) error {
		_, err := client.CoreV1().Pods(ns(k/podsPerNamespace)).Create(ctx, makePod(ns(k/podsPerNamespace), k%podsPerNamespace), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating Pods: %v", err)
	}
	if err := parallel(ctx, numNamespaces, createWorkers, func(ctx context.Context, i int) error {
		_, err := client.CoreV1().ResourceQuotas(ns(i)).Create(ctx, makeQuota(ns(i)), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating quotas: %v", err)
	}
}

func newClient(b *testing.B, base *rest.Config, userAgent string) kubernetes.Interface {
	b.Helper()
	cfg := rest.CopyConfig(base)
	cfg.UserAgent = userAgent
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// countWrites counts the controller's writes (by user agent) to ResourceQuotas in the bench
// namespaces. Failed writes (conflicts) count too: they cost the apiserver as much.
func countWrites(b *testing.B, env *testenv.Env, userAgent string) int {
	b.Helper()
	evs, err := env.Writes(testenv.ByUserAgentPrefix(userAgent, "resourcequotas"))
	if err != nil {
		b.Fatalf("reading the audit log: %v", err)
	}
	n := 0
	for _, ev := range evs {
		if strings.HasPrefix(ev.ObjectRef.Namespace, nsPrefix) || ev.ObjectRef.Namespace == sentinelNS {
			n++
		}
	}
	return n
}

// countFailedWrites counts the controller's quota writes the apiserver refused (conflicts).
func countFailedWrites(b *testing.B, env *testenv.Env, userAgent string) int {
	b.Helper()
	evs, err := env.Writes(testenv.ByUserAgentPrefix(userAgent, "resourcequotas"))
	if err != nil {
		b.Fatalf("reading the audit log: %v", err)
	}
	n := 0
	for _, ev := range evs {
		if strings.HasPrefix(ev.ObjectRef.Namespace, nsPrefix) && ev.ResponseStatus.Code >= 300 {
			n++
		}
	}
	return n
}

// buildOurs compiles quota-controller as it ships (static, stripped).
func buildOurs(b *testing.B) (string, error) {
	b.Helper()
	out := filepath.Join(b.TempDir(), "quota-controller")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "github.com/kcm-split/kcm-split/services/quota/cmd/quota-controller")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("building quota-controller: %v", err)
	}
	return out, nil
}

// ---- reporting ----

func progress(name string) func(string, ...any) {
	start := time.Now()
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench %-24s %6.1fs  %s\n", name, time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
}

func perDelete(writes int, lat []time.Duration) float64 {
	if len(lat) == 0 {
		return 0
	}
	return float64(writes) / float64(len(lat))
}

func (r *result) report(b *testing.B) {
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(msf(percentile(r.floor, 50)), "floor-p50-ms")
	b.ReportMetric(r.coldSync.Seconds(), "cold-sync-s")
	b.ReportMetric(float64(r.idleRSS)/(1<<20), "idle-rss-MiB")
	b.ReportMetric(msf(percentile(r.quiet, 50)), "delete-p50-ms")
	b.ReportMetric(msf(percentile(r.quiet, 99)), "delete-p99-ms")
	b.ReportMetric(msf(percentile(r.busy, 50)), "resync-delete-p50-ms")
	b.ReportMetric(msf(percentile(r.busy, 99)), "resync-delete-p99-ms")
	b.ReportMetric(perDelete(r.quietWrites, r.quiet), "writes/delete")
	b.ReportMetric(float64(r.restartW), "restart-writes")
}

func printTable(w io.Writer, mine, theirs *result) {
	if mine == nil && theirs == nil {
		return
	}
	type row struct {
		name string
		get  func(*result) float64
		f    string
	}
	pct := func(sel func(*result) []time.Duration, p float64) func(*result) float64 {
		return func(r *result) float64 { return float64(percentile(sel(r), p)) / float64(time.Millisecond) }
	}
	floor := func(r *result) []time.Duration { return r.floor }
	quiet := func(r *result) []time.Duration { return r.quiet }
	busy := func(r *result) []time.Duration { return r.busy }
	rows := []row{
		{"floor latency p50 (ms)", pct(floor, 50), "%.1f"},
		{"floor latency p99 (ms)", pct(floor, 99), "%.1f"},
		{"fixture setup, context (s)", func(r *result) float64 { return r.setup.Seconds() }, "%.1f"},
		{"cold sync (s)", func(r *result) float64 { return r.coldSync.Seconds() }, "%.2f"},
		{fmt.Sprintf("cold sync quota writes (target %d)", numNamespaces), func(r *result) float64 { return float64(r.coldWrites) }, "%.0f"},
		{"cold sync CPU (s)", func(r *result) float64 { return r.coldCPU.Seconds() }, "%.2f"},
		{"idle RSS (MiB)", func(r *result) float64 { return float64(r.idleRSS) / (1 << 20) }, "%.1f"},
		{"  of which anonymous, RssAnon (MiB)", func(r *result) float64 { return float64(r.idleAnon) / (1 << 20) }, "%.1f"},
		{"loaded RSS, max during deletes (MiB)", func(r *result) float64 { return float64(r.loadedRSS) / (1 << 20) }, "%.1f"},
		{"delete -> used p50 (ms)", pct(quiet, 50), "%.1f"},
		{"delete -> used p90 (ms)", pct(quiet, 90), "%.1f"},
		{"delete -> used p99 (ms)", pct(quiet, 99), "%.1f"},
		{"delete -> used max (ms)", pct(quiet, 100), "%.1f"},
		{"writes per delete (target 1.00)", func(r *result) float64 { return perDelete(r.quietWrites, r.quiet) }, "%.2f"},
		{"deletes CPU (s)", func(r *result) float64 { return r.quietCPU.Seconds() }, "%.2f"},
		{"warm restart -> sentinel synced (s)", func(r *result) float64 { return r.restartSync.Seconds() }, "%.2f"},
		{"warm restart writes, unchanged quotas (target 0)", func(r *result) float64 { return float64(r.restartW) }, "%.0f"},
		{"resync 1s: delete -> used p50 (ms)", pct(busy, 50), "%.1f"},
		{"resync 1s: delete -> used p90 (ms)", pct(busy, 90), "%.1f"},
		{"resync 1s: delete -> used p99 (ms)", pct(busy, 99), "%.1f"},
		{"resync 1s: delete -> used max (ms)", pct(busy, 100), "%.1f"},
		{"resync 1s: writes per delete (target 1.00)", func(r *result) float64 { return perDelete(r.busyWrites, r.busy) }, "%.2f"},
		{"refused writes (conflicts), whole run", func(r *result) float64 { return float64(r.failed) }, "%.0f"},
		{"resync 1s: CPU during deletes (s)", func(r *result) float64 { return r.busyResyncCPU.Seconds() }, "%.2f"},
	}
	cell := func(r *result, x row) string {
		if r == nil {
			return "n/a"
		}
		return fmt.Sprintf(x.f, x.get(r))
	}
	ratio := func(x row) string {
		if mine == nil || theirs == nil {
			return "n/a"
		}
		o, u := x.get(mine), x.get(theirs)
		switch {
		case u != 0:
			return fmt.Sprintf("%.2f", o/u)
		case o == 0:
			return "="
		default:
			return "inf"
		}
	}
	width := len("metric")
	for _, x := range rows {
		width = max(width, len(x.name))
	}
	line := func(a, b, c, d string) { fmt.Fprintf(w, "%-*s  %18s  %24s  %14s\n", width, a, b, c, d) }
	fmt.Fprintf(w, "\nQuota benchmark: %d namespaces x 1 quota x %d Pods, %d deletes per phase, --concurrent-resource-quota-syncs=%s\n\n",
		numNamespaces, podsPerNamespace, deletesPerPhase, concurrentSyncs)
	line("metric", ours.name, upstream.name, "ours/upstream")
	line(strings.Repeat("-", width), strings.Repeat("-", 18), strings.Repeat("-", 24), strings.Repeat("-", 14))
	for _, x := range rows {
		line(x.name, cell(mine, x), cell(theirs, x), ratio(x))
	}
	fmt.Fprintln(w, "\nLower is better everywhere; README.md defines each row.")
}
