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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/benchkit"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Scenario size and pacing, fixed so that runs compare.
const (
	numNamespaces    = 200
	podsPerNamespace = 20
	// deletesPerPhase Pods are deleted in each phase, round-robin over the namespaces.
	deletesPerPhase = 400
	// deletePause keeps the delete rate (and so the controller's writes) at about 13/s, under
	// both controllers' default client QPS (20/s): latency measures the controller, not its
	// client-side rate limiter.
	deletePause = 75 * time.Millisecond

	coldSyncTimeout = 3 * time.Minute
	deleteTimeout   = 30 * time.Second

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

// The two sides; each run also gets --resource-quota-sync-period (quietPeriod, then
// busyPeriod).
var (
	ours = benchkit.Ours("quota-controller", "github.com/kcm-split/kcm-split/services/quota/cmd/quota-controller",
		"--concurrent-resource-quota-syncs="+concurrentSyncs)
	upstream = benchkit.UpstreamSide("resourcequota-controller",
		"--concurrent-resource-quota-syncs="+concurrentSyncs)
)

func BenchmarkQuota(b *testing.B) {
	r := benchkit.RunSides(b, []benchkit.Side{ours, upstream}, benchkit.Side.Label, runScenario, (*result).report)
	printTable(os.Stdout, r[0], r[1])
}

// result holds everything one scenario measured.
type result struct {
	cold          benchkit.ColdStart // up to idle; Writes are quota writes, target one per quota
	quiet         []time.Duration    // phase 1: delete -> status.used, no full recalculation
	quietWrites   int
	quietCPU      time.Duration
	busy          []time.Duration // phase 2: the same, with a full recalculation every second
	busyWrites    int
	loadedRSS     int64 // max VmRSS sampled during phase 1
	failed        int   // refused writes (conflicts) over the whole run
	restartSync   time.Duration
	restartW      int
	busyResyncCPU time.Duration
}

func ns(i int) string { return fmt.Sprintf("%s%03d", nsPrefix, i) }

// Over 80 lines: the phases (floor, cold sync, quiet deletes, warm restart, busy deletes) share one control plane, the Pods left and the delete cursor.
func runScenario(b *testing.B, c benchkit.Side) *result {
	bin, env, logf := c.Begin(b)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := benchkit.Client(b, env.Config, "kcm-split-bench/fixtures")
	watchClient := benchkit.Client(b, env.Config, "kcm-split-bench/watch")
	r := &result{}

	quotas := benchkit.NewObserver[*corev1.ResourceQuota](ctx, b, watchClient, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().ResourceQuotas().Informer()
	})

	// 1. Floor: a quota status write seen by a watcher, the one hop the controller makes after
	// it learns of a delete.
	r.cold.Floor = measureFloor(ctx, b, client, quotas)
	logf("floor: p50 %s p99 %s", benchkit.MS(benchkit.Percentile(r.cold.Floor, 50)), benchkit.MS(benchkit.Percentile(r.cold.Floor, 99)))

	// 2. Fixtures: Pods first, then the quotas (so admission lets the Pods in without a
	// controller), then the controller's cold sync computes every quota from scratch.
	start := time.Now()
	createFixtures(ctx, b, client)
	r.cold.Setup = time.Since(start)
	logf("created %d namespaces x %d Pods + 1 quota in %s", numNamespaces, podsPerNamespace, r.cold.Setup.Round(time.Millisecond))

	remaining := make([]int, numNamespaces)
	for i := range remaining {
		remaining[i] = podsPerNamespace
	}
	converged := quotas.WhenAll(func(objs map[string]*corev1.ResourceQuota) bool {
		for i := range numNamespaces {
			rq := objs[ns(i)+"/"+quotaName]
			if rq == nil || !usedPods(rq, podsPerNamespace) {
				return false
			}
		}
		return true
	})
	proc := c.Start(b, bin, env.Kubeconfig, "--resource-quota-sync-period="+quietPeriod)
	at := proc.Await(converged, coldSyncTimeout, "every quota's used pods after the cold sync")
	r.cold.Sync = at.Sub(proc.Started)
	logf("cold sync: %s", r.cold.Sync.Round(time.Millisecond))
	r.cold.SettleIdle(proc)
	r.cold.Writes = countWrites(b, env, c.UserAgent)
	if r.cold.Writes == 0 {
		b.Fatalf("the audit log holds no quota writes by user agent %q although the quotas converged", c.UserAgent)
	}
	logf("idle: rss %s, %d quota writes", benchkit.MiBString(r.cold.IdleRSS), r.cold.Writes)

	// 3. Phase 1: deletes, no full recalculation.
	next := 0 // the next Pod to delete, over all namespaces
	before := countWrites(b, env, c.UserAgent)
	cpuBefore := proc.CPU()
	stopSampling := proc.SampleRSS(&r.loadedRSS, 50*time.Millisecond)
	r.quiet = deletes(ctx, b, client, quotas, proc, remaining, &next)
	stopSampling()
	time.Sleep(benchkit.QuietSettle)
	r.quietCPU = proc.CPU() - cpuBefore
	r.quietWrites = countWrites(b, env, c.UserAgent) - before
	logf("quiet deletes: p50 %s p99 %s, %d writes", benchkit.MS(benchkit.Percentile(r.quiet, 50)), benchkit.MS(benchkit.Percentile(r.quiet, 99)), r.quietWrites)

	// 4. Warm restart with a full recalculation every second: the restart itself must not
	// write (nothing changed), then phase 2 measures deletes during recalculations.
	before = countWrites(b, env, c.UserAgent)
	proc.Shutdown()
	proc = c.Start(b, bin, env.Kubeconfig, "--resource-quota-sync-period="+busyPeriod)
	benchkit.CreateNamespaces(ctx, b, client, sentinelNS)
	sentinel := quotas.When(sentinelNS+"/"+quotaName, func(rq *corev1.ResourceQuota) bool { return usedPods(rq, 0) })
	if _, err := client.CoreV1().ResourceQuotas(sentinelNS).Create(ctx, makeQuota(sentinelNS), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	at = proc.Await(sentinel, coldSyncTimeout, "the sentinel quota's status after the restart")
	r.restartSync = at.Sub(proc.Started)
	time.Sleep(benchkit.QuietSettle)
	r.restartW = countWrites(b, env, c.UserAgent) - before - 1 // the sentinel's own write
	logf("warm restart: sentinel synced after %s, %d writes to unchanged quotas", r.restartSync.Round(time.Millisecond), r.restartW)

	before = countWrites(b, env, c.UserAgent)
	cpuBefore = proc.CPU()
	r.busy = deletes(ctx, b, client, quotas, proc, remaining, &next)
	time.Sleep(benchkit.QuietSettle)
	r.busyResyncCPU = proc.CPU() - cpuBefore
	r.busyWrites = countWrites(b, env, c.UserAgent) - before
	logf("deletes during full recalculations: p50 %s p99 %s, %d writes", benchkit.MS(benchkit.Percentile(r.busy, 50)), benchkit.MS(benchkit.Percentile(r.busy, 99)), r.busyWrites)
	proc.Shutdown()
	r.failed = countFailedWrites(b, env, c.UserAgent)
	return r
}

func usedPods(rq *corev1.ResourceQuota, n int) bool {
	q, ok := rq.Status.Used[corev1.ResourcePods]
	return ok && q.Value() == int64(n)
}

// deletes deletes deletesPerPhase Pods, one at a time, and times the Delete response -> a
// watcher sees the quota's used pods drop. The controller learns of the delete about when the
// response arrives, so this is its reaction time plus one write-and-observe hop (the floor).
func deletes(ctx context.Context, b *testing.B, client kubernetes.Interface, quotas *benchkit.Observer[*corev1.ResourceQuota], proc *benchkit.Process, remaining []int, next *int) []time.Duration {
	b.Helper()
	out := make([]time.Duration, 0, deletesPerPhase)
	for range deletesPerPhase {
		i := *next % numNamespaces
		p := podsPerNamespace - remaining[i]
		*next++
		remaining[i]--
		want := remaining[i]
		seen := quotas.When(ns(i)+"/"+quotaName, func(rq *corev1.ResourceQuota) bool { return usedPods(rq, want) })
		zero := int64(0)
		if err := client.CoreV1().Pods(ns(i)).Delete(ctx, podName(p), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			b.Fatalf("deleting %s/%s: %v", ns(i), podName(p), err)
		}
		done := time.Now()
		at := proc.Await(seen, deleteTimeout, fmt.Sprintf("quota %s/%s used pods = %d", ns(i), quotaName, want))
		out = append(out, max(0, at.Sub(done)))
		time.Sleep(deletePause)
	}
	return out
}

// measureFloor times quota status writes issued -> seen by the watcher.
func measureFloor(ctx context.Context, b *testing.B, client kubernetes.Interface, quotas *benchkit.Observer[*corev1.ResourceQuota]) []time.Duration {
	b.Helper()
	benchkit.CreateNamespaces(ctx, b, client, floorNS)
	rq, err := client.CoreV1().ResourceQuotas(floorNS).Create(ctx, makeQuota(floorNS), metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return benchkit.MeasureFloor(b, deleteTimeout, func(i int) (<-chan time.Time, func()) {
		next := rq.DeepCopy()
		next.Status = corev1.ResourceQuotaStatus{Hard: next.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(i%50), resource.DecimalSI)}}
		want := i % 50
		seen := quotas.When(floorNS+"/"+quotaName, func(rq *corev1.ResourceQuota) bool {
			return usedPods(rq, want) && rq.ResourceVersion != next.ResourceVersion
		})
		return seen, func() {
			rq, err = client.CoreV1().ResourceQuotas(floorNS).UpdateStatus(ctx, next, metav1.UpdateOptions{})
			if err != nil {
				b.Fatalf("floor: %v", err)
			}
		}
	})
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
	if err := benchkit.Parallel(ctx, numNamespaces, benchkit.CreateWorkers, func(ctx context.Context, i int) error {
		_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns(i)}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating namespaces: %v", err)
	}
	if err := benchkit.Parallel(ctx, numNamespaces*podsPerNamespace, benchkit.CreateWorkers, func(ctx context.Context, k int) error {
		_, err := client.CoreV1().Pods(ns(k/podsPerNamespace)).Create(ctx, makePod(ns(k/podsPerNamespace), k%podsPerNamespace), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating Pods: %v", err)
	}
	if err := benchkit.Parallel(ctx, numNamespaces, benchkit.CreateWorkers, func(ctx context.Context, i int) error {
		_, err := client.CoreV1().ResourceQuotas(ns(i)).Create(ctx, makeQuota(ns(i)), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating quotas: %v", err)
	}
}

// countWrites counts the controller's writes (by user agent) to ResourceQuotas in the bench
// namespaces. Failed writes (conflicts) count too: they cost the apiserver as much.
func countWrites(b *testing.B, env *testenv.Env, userAgent string) int {
	b.Helper()
	return benchkit.CountWrites(b, env, testenv.ByUserAgentPrefix(userAgent, "resourcequotas"), func(ev testenv.AuditEvent) bool {
		return strings.HasPrefix(ev.ObjectRef.Namespace, nsPrefix) || ev.ObjectRef.Namespace == sentinelNS
	})
}

// countFailedWrites counts the controller's quota writes the apiserver refused (conflicts).
func countFailedWrites(b *testing.B, env *testenv.Env, userAgent string) int {
	b.Helper()
	return benchkit.CountWrites(b, env, testenv.ByUserAgentPrefix(userAgent, "resourcequotas"), func(ev testenv.AuditEvent) bool {
		return strings.HasPrefix(ev.ObjectRef.Namespace, nsPrefix) && ev.ResponseStatus.Code >= 300
	})
}

// ---- reporting ----

func perDelete(writes int, lat []time.Duration) float64 {
	if len(lat) == 0 {
		return 0
	}
	return float64(writes) / float64(len(lat))
}

func (r *result) report(b *testing.B) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.cold.Floor, 50)), "floor-p50-ms")
	b.ReportMetric(r.cold.Sync.Seconds(), "cold-sync-s")
	b.ReportMetric(benchkit.MiB(r.cold.IdleRSS), "idle-rss-MiB")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.quiet, 50)), "delete-p50-ms")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.quiet, 99)), "delete-p99-ms")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.busy, 50)), "resync-delete-p50-ms")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.busy, 99)), "resync-delete-p99-ms")
	b.ReportMetric(perDelete(r.quietWrites, r.quiet), "writes/delete")
	b.ReportMetric(float64(r.restartW), "restart-writes")
}

func printTable(w io.Writer, mine, theirs *result) {
	if mine == nil && theirs == nil {
		return
	}
	quiet := func(r *result) []time.Duration { return r.quiet }
	busy := func(r *result) []time.Duration { return r.busy }
	var rows benchkit.Rows[result]
	rows.AddColdStart(func(r *result) *benchkit.ColdStart { return &r.cold }, "quota", numNamespaces)
	rows.AddMiB("loaded RSS, max during deletes (MiB)", func(r *result) int64 { return r.loadedRSS })
	rows.AddPercentiles("delete -> used", quiet, "%.1f", 50, 90, 99, 100)
	rows.Add("writes per delete (target 1.00)", func(r *result) float64 { return perDelete(r.quietWrites, r.quiet) }, "%.2f")
	rows.AddSeconds("deletes CPU (s)", func(r *result) time.Duration { return r.quietCPU }, "%.2f")
	rows.AddSeconds("warm restart -> sentinel synced (s)", func(r *result) time.Duration { return r.restartSync }, "%.2f")
	rows.AddCount("warm restart writes, unchanged quotas (target 0)", func(r *result) int { return r.restartW })
	rows.AddPercentiles("resync 1s: delete -> used", busy, "%.1f", 50, 90, 99, 100)
	rows.Add("resync 1s: writes per delete (target 1.00)", func(r *result) float64 { return perDelete(r.busyWrites, r.busy) }, "%.2f")
	rows.AddCount("refused writes (conflicts), whole run", func(r *result) int { return r.failed })
	rows.AddSeconds("resync 1s: CPU during deletes (s)", func(r *result) time.Duration { return r.busyResyncCPU }, "%.2f")
	fmt.Fprintf(w, "\nQuota benchmark: %d namespaces x 1 quota x %d Pods, %d deletes per phase, --concurrent-resource-quota-syncs=%s\n\n",
		numNamespaces, podsPerNamespace, deletesPerPhase, concurrentSyncs)
	benchkit.Compare(ours.Name, upstream.Name, mine, theirs, rows).Write(w)
	fmt.Fprintln(w, "\nLower is better everywhere; README.md defines each row.")
}
