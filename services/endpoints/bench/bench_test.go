// Package bench compares the endpoints-controller binary with upstream kube-controller-manager
// running only its endpoints controller, on the same scenario against a real etcd +
// kube-apiserver (shared/testenv), and prints a side-by-side table. README.md explains each
// number. Timings are reported, never asserted; the benchmark fails only when a controller is
// functionally broken (Endpoints never converge, a process dies, no writes are audited).
package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/shared/benchkit"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Scenario size and pacing. Fixed, so runs are comparable with each other.
const (
	numServices    = 200
	podsPerService = 10
	numFlips       = 500
	// flipPause keeps the flip rate below both controllers' default client QPS (20/s), so
	// flip latency measures the controller, not its client-side rate limiter.
	flipPause = 50 * time.Millisecond
	seed      = 20260101

	coldSyncTimeout = 3 * time.Minute
	flipTimeout     = 30 * time.Second
	restartTimeout  = 2 * time.Minute

	benchNS    = "bench"
	floorNS    = "bench-floor"
	sentinelNS = "bench-sentinel"

	// Defaults of both controllers, passed explicitly so the comparison is like for like.
	concurrentSyncs = "5"
	batchPeriod     = "0s"
	clientQPS       = 20
	clientBurst     = 30
)

// The two sides, at the same settings (both controllers' defaults, passed explicitly so the
// comparison is like for like).
var (
	ours = benchkit.Ours("endpoints-controller", "github.com/kcm-split/kcm-split/services/endpoints/cmd/endpoints-controller",
		// Upstream runs its endpoints controller alone, with its client's 20 QPS / 30 burst:
		// so does ours (whose default budget covers its two controllers).
		"--controllers=endpoints-controller",
		"--kube-api-qps="+strconv.Itoa(clientQPS), "--kube-api-burst="+strconv.Itoa(clientBurst),
		"--concurrent-endpoint-syncs="+concurrentSyncs,
		"--endpoint-updates-batch-period="+batchPeriod,
	)
	upstream = benchkit.UpstreamSide("endpoints-controller",
		"--concurrent-endpoint-syncs="+concurrentSyncs,
		"--endpoint-updates-batch-period="+batchPeriod,
	)
)

func BenchmarkEndpoints(b *testing.B) {
	r := benchkit.RunSides(b, []benchkit.Side{ours, upstream}, benchkit.Side.Label, runScenario, (*result).report)
	printTable(os.Stdout, r[0], r[1])
}

// ---- the scenario ----

// result holds everything one scenario measured.
type result struct {
	cold        benchkit.ColdStart // up to idle; Writes are Endpoints writes, target one per Service
	flips       []time.Duration    // Pod status write -> watcher sees the Endpoints change
	flipWrites  int                // Endpoints writes during the flips
	flipCPU     time.Duration      // process CPU time spent during the flips
	loadedRSS   int64              // max VmRSS sampled during the flips
	peakRSS     int64              // VmHWM at the end of the flips
	restartSync time.Duration      // restart -> sentinel Service has its Endpoints
	restartW    int                // Endpoints writes for the 200 Services after the restart
}

// scenario is what both benchmarks' scenarios start from: the side's executable, a fresh
// control plane with the namespaces, the benchmark's clients and the floor.
type scenario struct {
	bin  string
	env  *testenv.Env
	logf func(format string, args ...any)
	ctx  context.Context // ended by stop
	// stop ends ctx, stopping the benchmark's informers: defer it in the scenario, since their
	// factories' Shutdown (a cleanup of tb) waits for them to stop.
	stop                context.CancelFunc
	client, watchClient kubernetes.Interface
	floor               []time.Duration
}

// begin starts a scenario of side c in namespaces (floorNS is added) and measures the floor:
// the same kind of write the flips make, seen by the same kind of watcher.
func begin(b *testing.B, c benchkit.Side, namespaces ...string) *scenario {
	b.Helper()
	s := &scenario{}
	s.bin, s.env, s.logf = c.Begin(b)
	ctx, cancel := context.WithCancel(context.Background())
	s.ctx, s.stop = ctx, cancel
	started := false
	defer func() {
		if !started { // failed on the way (Fatal): the caller gets no stop to defer
			cancel()
		}
	}()
	s.client = benchkit.Client(b, s.env.Config, "kcm-split-bench/fixtures")
	benchkit.CreateNamespaces(ctx, b, s.client, append(namespaces, floorNS)...)
	s.watchClient = benchkit.Client(b, s.env.Config, "kcm-split-bench/watch")
	s.floor = measureFloor(ctx, b, s.client, s.watchClient)
	s.logf("floor: p50 %s p99 %s", benchkit.MS(benchkit.Percentile(s.floor, 50)), benchkit.MS(benchkit.Percentile(s.floor, 99)))
	started = true
	return s
}

func runScenario(b *testing.B, c benchkit.Side) *result {
	sc := begin(b, c, benchNS, sentinelNS)
	defer sc.stop()
	bin, env, logf, ctx, client, watchClient := sc.bin, sc.env, sc.logf, sc.ctx, sc.client, sc.watchClient
	r := &result{}
	r.cold.Floor = sc.floor

	// 2. Fixtures, then the controller's cold sync.
	start := time.Now()
	pods := createFixtures(ctx, b, client, numServices, podsPerService, func(s, i int) *corev1.Pod { return makePod(benchNS, s, i, podIP(s, i)) }, nil)
	r.cold.Setup = time.Since(start)
	logf("created %d Services and %d Pods in %s", numServices, numServices*podsPerService, r.cold.Setup.Round(time.Millisecond))

	eps := benchkit.NewObserver[*corev1.Endpoints](ctx, b, watchClient, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Endpoints().Informer()
	})
	converged := eps.WhenAll(endpointsComplete(numServices, podsPerService))
	proc := c.Start(b, bin, env.Kubeconfig)
	at := proc.Await(converged, coldSyncTimeout, "all Endpoints complete after the cold sync")
	r.cold.Sync = at.Sub(proc.Started)
	logf("cold sync: %s", r.cold.Sync.Round(time.Millisecond))

	// 3. Idle.
	r.cold.SettleIdle(proc)
	r.cold.Writes = countWrites(b, env, "endpoints", c.UserAgent, benchNS)
	if r.cold.Writes == 0 {
		b.Fatalf("the audit log holds no Endpoints writes by user agent %q although the Endpoints converged: did the user agent change?", c.UserAgent)
	}
	logf("idle: rss %s, %d Endpoints writes", benchkit.MiBString(r.cold.IdleRSS), r.cold.Writes)

	// 4. Readiness flips.
	before := r.cold.Writes
	cpuBefore := proc.CPU()
	stopSampling := proc.SampleRSS(&r.loadedRSS, 50*time.Millisecond)
	r.flips = flip(ctx, b, client, eps, proc, pods)
	stopSampling()
	time.Sleep(benchkit.QuietSettle)
	r.flipCPU = proc.CPU() - cpuBefore
	r.peakRSS = proc.Memory().HWM
	r.flipWrites = countWrites(b, env, "endpoints", c.UserAgent, benchNS) - before
	logf("flips: p50 %s p99 %s, %d writes", benchkit.MS(benchkit.Percentile(r.flips, 50)), benchkit.MS(benchkit.Percentile(r.flips, 99)), r.flipWrites)

	// 5. Warm restart: nothing changed, so a correct controller writes nothing.
	before = countWrites(b, env, "endpoints", c.UserAgent, benchNS)
	proc.Shutdown()
	proc = c.Start(b, bin, env.Kubeconfig)
	sentinelKey := sentinelNS + "/" + serviceName(0)
	sentinelIP := "10.255.0.1"
	sentinel := eps.When(sentinelKey, func(ep *corev1.Endpoints) bool { return slices.Contains(testobj.ReadyIPs(ep), sentinelIP) })
	// Created after the new process started, so it is queued behind the 200 Services of
	// the initial list (or listed with them): once it is synced, so are they.
	if _, err := client.CoreV1().Services(sentinelNS).Create(ctx, makeService(sentinelNS, 0), metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating the sentinel Service: %v", err)
	}
	if _, err := createPod(ctx, client, makePod(sentinelNS, 0, 0, sentinelIP)); err != nil {
		b.Fatalf("creating the sentinel Pod: %v", err)
	}
	at = proc.Await(sentinel, restartTimeout, "the sentinel Service's Endpoints after the restart")
	r.restartSync = at.Sub(proc.Started)
	time.Sleep(benchkit.QuietSettle)
	r.restartW = countWrites(b, env, "endpoints", c.UserAgent, benchNS) - before
	logf("warm restart: sentinel synced after %s, %d Endpoints writes", r.restartSync.Round(time.Millisecond), r.restartW)
	proc.Shutdown()
	return r
}

// measureFloor times one write-and-observe hop: UpdateStatus issued -> a watcher on Pods sees
// the new status. A controller makes exactly such a hop (its Endpoints write, seen by our
// watcher) after it learns of a Pod change, so this bounds flip latency from below.
func measureFloor(ctx context.Context, b *testing.B, client, watchClient kubernetes.Interface) []time.Duration {
	b.Helper()
	pod, err := createPod(ctx, client, makePod(floorNS, 0, 0, "10.254.0.1"))
	if err != nil {
		b.Fatalf("creating the floor Pod: %v", err)
	}
	obs := benchkit.NewObserver[*corev1.Pod](ctx, b, watchClient, floorNS, func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Pods().Informer()
	})
	key := floorNS + "/" + pod.Name
	return benchkit.MeasureFloor(b, flipTimeout, func(int) (<-chan time.Time, func()) {
		ready := !isReady(pod)
		next := pod.DeepCopy()
		setReady(next, ready)
		seen := obs.When(key, func(p *corev1.Pod) bool { return isReady(p) == ready })
		return seen, func() {
			pod, err = client.CoreV1().Pods(floorNS).UpdateStatus(ctx, next, metav1.UpdateOptions{})
			if err != nil {
				b.Fatalf("floor: updating Pod status: %v", err)
			}
		}
	})
}

// flip turns the readiness of numFlips Pods, one at a time, and times UpdateStatus response ->
// a watcher on Endpoints sees the Pod's address move to the other list. The controller learns
// of the change about when the response arrives, so this is its reaction time plus one
// write-and-observe hop (the floor).
func flip(ctx context.Context, b *testing.B, client kubernetes.Interface, eps *benchkit.Observer[*corev1.Endpoints], proc *benchkit.Process, pods [][]*corev1.Pod) []time.Duration {
	b.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	out := make([]time.Duration, 0, numFlips)
	for range numFlips {
		s, i := rng.IntN(numServices), rng.IntN(podsPerService)
		pod := pods[s][i]
		ip := pod.Status.PodIP
		ready := !isReady(pod)
		next := pod.DeepCopy()
		setReady(next, ready)
		seen := eps.When(benchNS+"/"+serviceName(s), func(ep *corev1.Endpoints) bool {
			if ready {
				return slices.Contains(testobj.ReadyIPs(ep), ip)
			}
			return slices.Contains(testobj.NotReadyIPs(ep), ip)
		})
		updated, err := client.CoreV1().Pods(benchNS).UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			b.Fatalf("flip: updating Pod %s status: %v", pod.Name, err)
		}
		done := time.Now()
		at := proc.Await(seen, flipTimeout, fmt.Sprintf("Pod %s (%s) as ready=%v in Endpoints %s", pod.Name, ip, ready, serviceName(s)))
		out = append(out, max(0, at.Sub(done)))
		pods[s][i] = updated
		time.Sleep(flipPause)
	}
	return out
}

// ---- fixtures ----

func serviceName(s int) string { return fmt.Sprintf("svc-%03d", s) }

// podIP is unique per (service, pod) and stable across runs.
func podIP(s, i int) string { return fmt.Sprintf("10.%d.%d.%d", 64+s/256, s%256, i+1) }

func makeService(ns string, s int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: serviceName(s)},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": serviceName(s)},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// makePod returns a Running, Ready Pod of Service s as a kubelet would report it.
func makePod(ns string, s, i int, ip string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%02d", serviceName(s), i), Labels: map[string]string{"app": serviceName(s)}},
		Spec: corev1.PodSpec{
			NodeName:   fmt.Sprintf("node-%02d", i),
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
	setReady(p, true)
	return p
}

// createPod creates p and then writes its status, the way a Pod gets it in a cluster:
// the create drops status, the kubelet reports it.
func createPod(ctx context.Context, client kubernetes.Interface, p *corev1.Pod) (*corev1.Pod, error) {
	status := p.Status
	created, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating Pod %s: %w", p.Name, err)
	}
	created.Status = status
	updated, err := client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("writing Pod %s status: %w", p.Name, err)
	}
	return updated, nil
}

// createFixtures creates services Services in benchNS with perService Pods each, pod(s, i)
// being Pod i of Service s, and returns the Pods as last written, indexed [service][pod], so
// flips can update them without reading them back. logf, when not nil, hears of every tenth
// of the Pods created.
func createFixtures(ctx context.Context, b *testing.B, client kubernetes.Interface, services, perService int, pod func(s, i int) *corev1.Pod, logf func(string, ...any)) [][]*corev1.Pod {
	b.Helper()
	err := benchkit.Parallel(ctx, services, benchkit.CreateWorkers, func(ctx context.Context, s int) error {
		_, err := client.CoreV1().Services(benchNS).Create(ctx, makeService(benchNS, s), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating Services: %v", err)
	}
	pods := make([][]*corev1.Pod, services)
	for s := range pods {
		pods[s] = make([]*corev1.Pod, perService)
	}
	total := services * perService
	var created atomic.Int64
	err = benchkit.Parallel(ctx, total, benchkit.CreateWorkers, func(ctx context.Context, n int) error {
		s, i := n/perService, n%perService
		p, err := createPod(ctx, client, pod(s, i))
		pods[s][i] = p
		if done := created.Add(1); logf != nil && done%int64(max(1, total/10)) == 0 {
			logf("fixtures: %d of %d Pods created", done, total)
		}
		return err
	})
	if err != nil {
		b.Fatalf("creating Pods: %v", err)
	}
	return pods
}

// endpointsComplete holds once the Endpoints of Services 0..services-1 in benchNS each list
// perService ready addresses and no others.
func endpointsComplete(services, perService int) func(map[string]*corev1.Endpoints) bool {
	return func(objs map[string]*corev1.Endpoints) bool {
		for s := range services {
			ep := objs[benchNS+"/"+serviceName(s)]
			if ep == nil || len(testobj.ReadyIPs(ep)) != perService || len(testobj.NotReadyIPs(ep)) != 0 {
				return false
			}
		}
		return true
	}
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setReady turns p's readiness as a kubelet does: the Ready condition (added when missing)
// and, where the Pod has them, ContainersReady and its containers' ready flags.
func setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	found := false
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			found = found || c.Type == corev1.PodReady
			c.Status, c.LastTransitionTime = status, now
		}
	}
	if !found {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: status, LastTransitionTime: now})
	}
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = ready
	}
}

// countWrites counts the writes to resource ("endpoints", "endpointslices") the controller
// (by user agent) made in ns, failed ones included: they cost the apiserver as much.
func countWrites(b *testing.B, env *testenv.Env, resource, userAgent, ns string) int {
	b.Helper()
	return benchkit.CountWrites(b, env, testenv.ByUserAgentPrefix(userAgent, resource), benchkit.InNamespace(ns))
}

// ---- reporting ----

func (r *result) perFlip() float64 { return float64(r.flipWrites) / float64(len(r.flips)) }

// report publishes the key numbers as benchmark metrics, so benchstat can compare runs.
func (r *result) report(b *testing.B) {
	b.ReportMetric(0, "ns/op") // one scenario per run: ns/op would only repeat the wall time
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.cold.Floor, 50)), "floor-p50-ms")
	b.ReportMetric(r.cold.Sync.Seconds(), "cold-sync-s")
	b.ReportMetric(float64(r.cold.Writes), "cold-writes")
	b.ReportMetric(benchkit.MiB(r.cold.IdleRSS), "idle-rss-MiB")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.flips, 50)), "flip-p50-ms")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.flips, 99)), "flip-p99-ms")
	b.ReportMetric(r.perFlip(), "writes/flip")
	b.ReportMetric(benchkit.MiB(r.loadedRSS), "loaded-rss-MiB")
	b.ReportMetric(float64(r.restartW), "restart-writes")
}

// printTable prints ours (mine) and upstream (theirs) side by side; either may be nil
// (skipped).
func printTable(w io.Writer, mine, theirs *result) {
	if mine == nil && theirs == nil {
		return
	}
	var rows benchkit.Rows[result]
	rows.AddColdStart(func(r *result) *benchkit.ColdStart { return &r.cold }, "Endpoints", numServices)
	rows.AddPercentiles("flip latency", func(r *result) []time.Duration { return r.flips }, "%.1f", 50, 90, 99, 100)
	rows.Add("writes per flip (target 1.00)", (*result).perFlip, "%.2f")
	rows.AddSeconds("flips CPU (s)", func(r *result) time.Duration { return r.flipCPU }, "%.2f")
	rows.AddMiB("loaded RSS, max during flips (MiB)", func(r *result) int64 { return r.loadedRSS })
	rows.AddMiB("peak RSS, VmHWM (MiB)", func(r *result) int64 { return r.peakRSS })
	rows.AddSeconds("warm restart -> sentinel synced (s)", func(r *result) time.Duration { return r.restartSync }, "%.2f")
	rows.AddCount("warm restart Endpoints writes (target 0)", func(r *result) int { return r.restartW })
	fmt.Fprintf(w, "\nEndpoints benchmark: %d Services x %d Pods, %d readiness flips, --concurrent-endpoint-syncs=%s, --endpoint-updates-batch-period=%s\n\n",
		numServices, podsPerService, numFlips, concurrentSyncs, batchPeriod)
	benchkit.Compare(ours.Name, upstream.Name, mine, theirs, rows).Write(w)
	fmt.Fprintf(w, "\nLower is better everywhere; README.md defines each row. Both clients default to %d QPS / %d burst, so creating %d Endpoints takes at least %.1fs of client-side throttling.\n\n",
		clientQPS, clientBurst, numServices, float64(numServices-clientBurst)/clientQPS)
}
