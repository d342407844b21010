// Package bench measures how fast nodelifecycle-controller notices silent Nodes, against
// upstream kube-controller-manager running only its node-lifecycle-controller, on the same
// scenario and a fresh real etcd + kube-apiserver (shared/testenv) each: 200 Nodes in 4
// zones kept alive by Lease renewals from the harness, then 10 of them stopped. README.md
// explains each number. Timings are reported, never asserted; the benchmark fails only when
// a controller is functionally broken (a stopped Node is never marked, a process dies).
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/benchkit"
)

// Scenario size and pacing, fixed so runs compare.
const (
	numNodes   = 200
	numZones   = 4
	numStopped = 10
	// renewEvery is each Node's Lease renewal interval (kubelets: 10 s with a 40 s Lease);
	// the renewals are spread evenly over it.
	renewEvery = 5 * time.Second
	renewers   = 4
	// grace is --node-monitor-grace-period on both sides; the monitor period stays at its
	// default (5 s), the bound upstream's detection waits on.
	grace = 20 * time.Second
	// stopSpacing spreads the stops, so their deadlines fall at different points of
	// upstream's monitor period.
	stopSpacing = 1300 * time.Millisecond
	// steady is how long every Node stays alive under the controller before the stops
	// (idle RSS and CPU are read at its end).
	steady          = 30 * time.Second
	afterDetection  = 10 * time.Second
	syncTimeout     = 3 * time.Minute
	detectTimeout   = grace + 2*time.Minute
	region          = "bench"
	upstreamPeriod  = "5s"
	admissionTaint  = corev1.TaintNodeNotReady
	unreachableTKey = corev1.TaintNodeUnreachable
)

// Both sides get the same grace and monitor period.
var (
	timing = []string{"--node-monitor-grace-period=" + grace.String(), "--node-monitor-period=" + upstreamPeriod}
	ours   = benchkit.Ours("nodelifecycle-controller", "github.com/kcm-split/kcm-split/services/nodelifecycle/cmd/nodelifecycle-controller", timing...)
	// Upstream's NoExecute taints come from its taint-eviction-controller.
	upstream = benchkit.UpstreamSide("node-lifecycle-controller,taint-eviction-controller", timing...)
)

func BenchmarkNodeLifecycle(b *testing.B) {
	r := benchkit.RunSides(b, []benchkit.Side{ours, upstream}, benchkit.Side.Label, runScenario, (*result).report)
	printTable(os.Stdout, r[0], r[1])
}

// result is what one scenario measured.
type result struct {
	setup      time.Duration   // creating the Nodes and Leases (context only)
	coldSync   time.Duration   // start -> every Node rid of the admission not-ready taint
	idleRSS    int64           // VmRSS at the end of the steady phase
	idleAnon   int64           // RssAnon: idleRSS without the executable's file-backed pages
	idleCPU    time.Duration   // CPU used during the steady phase
	overshoot  []time.Duration // per stopped Node: Ready=Unknown seen - (last renewal + grace)
	taintDelay []time.Duration // per stopped Node tainted: NoExecute seen - Unknown seen
	falsePos   int             // other Nodes ever seen not Ready or unreachable
	peakRSS    int64
	undetected int
}

func runScenario(b *testing.B, c benchkit.Side) *result {
	bin, env, logf := c.Begin(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := benchkit.Client(b, env.Config, "kcm-split-bench/kubelets")
	r := &result{}

	// 1. Nodes and their kubelets.
	start := time.Now()
	k := newKubelets(client)
	createNodes(ctx, b, client)
	k.start(ctx)
	defer func() { cancel(); k.wait() }()
	r.setup = time.Since(start)
	logf("created %d nodes in %d zones in %s", numNodes, numZones, r.setup.Round(time.Millisecond))

	obs := newObserver(ctx, b, benchkit.Client(b, env.Config, "kcm-split-bench/watch"))

	// 2. The controller: cold sync is every Node losing the admission taint.
	proc := c.Start(b, bin, env.Kubeconfig)
	at := proc.Await(obs.whenClean(), syncTimeout, "every Ready node rid of the not-ready taint")
	r.coldSync = at.Sub(proc.Started)
	logf("cold sync: %s", r.coldSync.Round(time.Millisecond))

	// 3. Steady: everything alive.
	cpu0 := proc.CPU()
	time.Sleep(steady)
	r.idleCPU = proc.CPU() - cpu0
	mem := proc.Memory()
	r.idleRSS, r.idleAnon = mem.RSS, mem.Anon
	logf("steady %s: rss %s (anon %s), cpu %s", steady, benchkit.MiBString(r.idleRSS), benchkit.MiBString(r.idleAnon), r.idleCPU)

	// 4. Stop 10 Nodes, spread over zones and over time.
	stopped := make([]string, 0, numStopped)
	for i := range numStopped {
		stopped = append(stopped, nodeName(i*numNodes/numStopped+i%numZones))
	}
	obs.setStopped(stopped)
	stopSample := proc.SampleRSS(&r.peakRSS, 100*time.Millisecond)
	for _, n := range stopped {
		k.stop(n)
		time.Sleep(stopSpacing)
	}
	deadline := time.Now().Add(detectTimeout)
	for time.Now().Before(deadline) && obs.detected() < numStopped {
		if proc.Exited() {
			b.Fatalf("%s exited while nodes were failing", c.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(afterDetection)
	stopSample()
	for _, n := range stopped {
		unknownAt, taintAt := obs.times(n)
		if unknownAt.IsZero() {
			r.undetected++
			continue
		}
		r.overshoot = append(r.overshoot, unknownAt.Sub(k.lastRenewal(n).Add(grace)))
		if !taintAt.IsZero() {
			r.taintDelay = append(r.taintDelay, taintAt.Sub(unknownAt))
		}
	}
	r.falsePos = obs.falsePositives()
	logf("overshoot p50 %s p99 %s, %d undetected, %d false positives",
		benchkit.MS(benchkit.Percentile(r.overshoot, 50)), benchkit.MS(benchkit.Percentile(r.overshoot, 99)), r.undetected, r.falsePos)
	if r.undetected > 0 {
		b.Errorf("%s never marked %d stopped nodes", c.Name, r.undetected)
	}
	proc.Shutdown()
	return r
}

// ---- fixtures and kubelets ----

func nodeName(i int) string { return fmt.Sprintf("node-%03d", i) }
func zoneOf(i int) string   { return fmt.Sprintf("zone-%d", i%numZones) }

func createNodes(ctx context.Context, b *testing.B, client kubernetes.Interface) {
	b.Helper()
	err := benchkit.Parallel(ctx, numNodes, benchkit.CreateWorkers, func(ctx context.Context, i int) error {
		now := metav1.Now()
		_, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: map[string]string{
				corev1.LabelTopologyRegion: region, corev1.LabelTopologyZone: zoneOf(i), corev1.LabelHostname: nodeName(i)}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		holder, dur, renew := nodeName(i), int32(40), metav1.NewMicroTime(time.Now())
		_, err = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName(i)},
			Spec:       coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating nodes: %v", err)
	}
}

// kubelets renews every Node's Lease every renewEvery, spread evenly, until stopped one by
// one.
type kubelets struct {
	client  kubernetes.Interface
	mu      sync.Mutex
	stopped map[string]bool
	last    map[string]time.Time // last renewal answered, per Node
	wg      sync.WaitGroup
}

func newKubelets(client kubernetes.Interface) *kubelets {
	return &kubelets{client: client, stopped: map[string]bool{}, last: map[string]time.Time{}}
}

func (k *kubelets) start(ctx context.Context) {
	per := numNodes / renewers
	for w := range renewers {
		k.wg.Go(func() {
			// Worker w renews nodes w, w+renewers, ...; one every renewEvery/per.
			step := renewEvery / time.Duration(per)
			time.Sleep(step * time.Duration(w) / renewers)
			t := time.NewTicker(step)
			defer t.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				k.renew(ctx, nodeName((i%per)*renewers+w))
			}
		})
	}
}

func (k *kubelets) wait() { k.wg.Wait() }

func (k *kubelets) renew(ctx context.Context, name string) {
	k.mu.Lock()
	stop := k.stopped[name]
	k.mu.Unlock()
	if stop {
		return
	}
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	l, err := leases.Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return
	}
	// Recorded even when stopped meanwhile: a renewal in flight at the stop still counts.
	k.mu.Lock()
	k.last[name] = time.Now()
	k.mu.Unlock()
}

// stop ends a Node's renewals.
func (k *kubelets) stop(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped[name] = true
}

// lastRenewal is when the Node's last renewal was answered.
func (k *kubelets) lastRenewal(name string) time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last[name]
}

// ---- watching ----

// observer watches Nodes: when each stopped one is first seen Ready=Unknown and first seen
// with the unreachable NoExecute taint, and whether any other ever looks unhealthy.
type observer struct {
	mu        sync.Mutex
	nodes     map[string]*corev1.Node
	stopped   map[string]bool
	unknownAt map[string]time.Time
	taintAt   map[string]time.Time
	falsePos  map[string]bool
	clean     chan time.Time
}

func newObserver(ctx context.Context, b *testing.B, client kubernetes.Interface) *observer {
	b.Helper()
	o := &observer{nodes: map[string]*corev1.Node{}, stopped: map[string]bool{}, unknownAt: map[string]time.Time{},
		taintAt: map[string]time.Time{}, falsePos: map[string]bool{}}
	benchkit.Inform(ctx, b, client, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Nodes().Informer()
	}, func(obj any, deleted bool) {
		if !deleted {
			o.observe(obj)
		}
	})
	return o
}

func (o *observer) observe(obj any) {
	at := time.Now()
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.nodes[n.Name] = n
	unknown, unreachable := false, false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			unknown = true
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == unreachableTKey && t.Effect == corev1.TaintEffectNoExecute {
			unreachable = true
		}
	}
	switch {
	case o.stopped[n.Name]:
		if unknown && o.unknownAt[n.Name].IsZero() {
			o.unknownAt[n.Name] = at
		}
		if unreachable && o.taintAt[n.Name].IsZero() {
			o.taintAt[n.Name] = at
		}
	case unknown || unreachable:
		o.falsePos[n.Name] = true
	}
	if o.clean != nil && o.allClean() {
		o.clean <- at
		o.clean = nil
	}
}

// allClean: every Node known, Ready, without the admission not-ready taint. Under o.mu.
func (o *observer) allClean() bool {
	if len(o.nodes) < numNodes {
		return false
	}
	for _, n := range o.nodes {
		for _, t := range n.Spec.Taints {
			if t.Key == admissionTaint {
				return false
			}
		}
	}
	return true
}

func (o *observer) whenClean() <-chan time.Time {
	ch := make(chan time.Time, 1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.allClean() {
		ch <- time.Now()
	} else {
		o.clean = ch
	}
	return ch
}

func (o *observer) setStopped(names []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range names {
		o.stopped[n] = true
	}
}

func (o *observer) detected() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.unknownAt)
}

func (o *observer) times(name string) (unknown, taint time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.unknownAt[name], o.taintAt[name]
}

func (o *observer) falsePositives() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.falsePos)
}

func (r *result) report(b *testing.B) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.overshoot, 50)), "overshoot-p50-ms")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.overshoot, 99)), "overshoot-p99-ms")
	b.ReportMetric(float64(r.falsePos), "false-positives")
	b.ReportMetric(benchkit.MiB(r.idleRSS), "idle-rss-MiB")
}

func printTable(w io.Writer, mine, theirs *result) {
	if mine == nil && theirs == nil {
		return
	}
	var rows benchkit.Rows[result]
	rows.AddSeconds("node setup, context (s)", func(r *result) time.Duration { return r.setup }, "%.1f")
	rows.AddSeconds("cold sync: admission taints lifted (s)", func(r *result) time.Duration { return r.coldSync }, "%.2f")
	rows.AddSeconds(fmt.Sprintf("idle CPU over %s (s)", steady), func(r *result) time.Duration { return r.idleCPU }, "%.2f")
	rows.AddMiB("idle RSS (MiB)", func(r *result) int64 { return r.idleRSS })
	rows.AddMiB("  of which anonymous, RssAnon (MiB)", func(r *result) int64 { return r.idleAnon })
	rows.AddPercentiles("detection overshoot", func(r *result) []time.Duration { return r.overshoot }, "%.0f", 50, 99, 100)
	rows.AddPercentiles("Unknown -> NoExecute taint", func(r *result) []time.Duration { return r.taintDelay }, "%.0f", 50)
	rows.AddCount("stopped nodes tainted NoExecute", func(r *result) int { return len(r.taintDelay) })
	rows.AddCount(fmt.Sprintf("false positives on the other %d (target 0)", numNodes-numStopped), func(r *result) int { return r.falsePos })
	rows.AddMiB("peak RSS while nodes fail (MiB)", func(r *result) int64 { return r.peakRSS })
	fmt.Fprintln(w)
	benchkit.Compare(ours.Name, upstream.Name, mine, theirs, rows).Write(w)
}
