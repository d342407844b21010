// Package bench measures how fast nodelifecycle-controller notices silent Nodes, against
// upstream kube-controller-manager running only its node-lifecycle-controller, on the same
// scenario and a fresh real etcd + kube-apiserver (shared/testenv) each: 200 Nodes in 4
// zones kept alive by Lease renewals from the harness, then 10 of them stopped. README.md
// explains each number. Timings are reported, never asserted; the benchmark fails only when
// a controller is functionally broken (a stopped Node is never marked, a process dies).
package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/testenv"
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
	createWorkers   = 16
	region          = "bench"
	upstreamPeriod  = "5s"
	stopTimeout     = 30 * time.Second
	admissionTaint  = corev1.TaintNodeNotReady
	unreachableTKey = corev1.TaintNodeUnreachable
)

type controllerUnderTest struct {
	name   string
	binary func(b *testing.B) (string, error)
	args   func(kubeconfig string) []string
}

var ours = controllerUnderTest{
	name:   "nodelifecycle-controller",
	binary: buildOurs,
	args: func(kubeconfig string) []string {
		port, _ := testenv.FreePort()
		return []string{
			"--kubeconfig=" + kubeconfig, "--leader-elect=false",
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
			"--node-monitor-grace-period=" + grace.String(), "--node-monitor-period=" + upstreamPeriod,
			"--log-level=info",
		}
	},
}

var upstream = controllerUnderTest{
	name: "kube-controller-manager",
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
	args: func(kubeconfig string) []string {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=node-lifecycle-controller,taint-eviction-controller",
			"--leader-elect=false", "--use-service-account-credentials=false", "--secure-port=0",
			"--node-monitor-grace-period=" + grace.String(), "--node-monitor-period=" + upstreamPeriod,
			"--v=1",
		}
	},
}

func BenchmarkNodeLifecycle(b *testing.B) {
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
	client := newClient(b, env.Config, "kcm-split-bench/kubelets")
	r := &result{}

	// 1. Nodes and their kubelets.
	start = time.Now()
	k := newKubelets(client)
	createNodes(ctx, b, client)
	k.start(ctx)
	defer func() { cancel(); k.wait() }()
	r.setup = time.Since(start)
	logf("created %d nodes in %d zones in %s", numNodes, numZones, r.setup.Round(time.Millisecond))

	obs := newObserver(ctx, b, newClient(b, env.Config, "kcm-split-bench/watch"))

	// 2. The controller: cold sync is every Node losing the admission taint.
	proc := startController(b, c, bin, env.Kubeconfig)
	at := proc.await(b, obs.whenClean(), syncTimeout, "every Ready node rid of the not-ready taint")
	r.coldSync = at.Sub(proc.started)
	logf("cold sync: %s", r.coldSync.Round(time.Millisecond))

	// 3. Steady: everything alive.
	cpu0 := proc.cpu(b)
	time.Sleep(steady)
	r.idleCPU = proc.cpu(b) - cpu0
	r.idleRSS, _ = proc.memory(b)
	r.idleAnon = proc.anonRSS(b)
	logf("steady %s: rss %s (anon %s), cpu %s", steady, mib(r.idleRSS), mib(r.idleAnon), r.idleCPU)

	// 4. Stop 10 Nodes, spread over zones and over time.
	stopped := make([]string, 0, numStopped)
	for i := range numStopped {
		stopped = append(stopped, nodeName(i*numNodes/numStopped+i%numZones))
	}
	obs.setStopped(stopped)
	stopSample := proc.sampleRSS(&r.peakRSS)
	for _, n := range stopped {
		k.stop(n)
		time.Sleep(stopSpacing)
	}
	deadline := time.Now().Add(detectTimeout)
	for time.Now().Before(deadline) && obs.detected() < numStopped {
		if proc.exited() {
			b.Fatalf("%s exited while nodes were failing", c.name)
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
		ms(percentile(r.overshoot, 50)), ms(percentile(r.overshoot, 99)), r.undetected, r.falsePos)
	if r.undetected > 0 {
		b.Errorf("%s never marked %d stopped nodes", c.name, r.undetected)
	}
	proc.stop(b)
	return r
}

// ---- fixtures and kubelets ----

func nodeName(i int) string { return fmt.Sprintf("node-%03d", i) }
func zoneOf(i int) string   { return fmt.Sprintf("zone-%d", i%numZones) }

func createNodes(ctx context.Context, b *testing.B, client kubernetes.Interface) {
	b.Helper()
	err := parallel(ctx, numNodes, createWorkers, func(ctx context.Context, i int) error {
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
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.observe(obj) },
		UpdateFunc: func(_, obj any) { o.observe(obj) },
	})
	if err != nil {
		b.Fatal(err)
	}
	factory.Start(ctx.Done())
	b.Cleanup(factory.Shutdown)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("the benchmark's own informer never synced")
	}
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

// ---- helpers ----

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

func parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	var mu sync.Mutex
	var first error
	next := 0
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil
				mu.Unlock()
				if stop || i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return first
}

type process struct {
	name    string
	cmd     *exec.Cmd
	log     string
	started time.Time
	done    chan struct{}
}

func startController(b *testing.B, c controllerUnderTest, bin, kubeconfig string) *process {
	b.Helper()
	f, err := os.CreateTemp(b.TempDir(), c.name+"-*.log")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, c.args(kubeconfig)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &process{name: c.name, cmd: cmd, log: f.Name(), done: make(chan struct{}), started: time.Now()}
	if err := cmd.Start(); err != nil {
		f.Close()
		b.Fatalf("starting %s: %v", c.name, err)
	}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	b.Cleanup(func() {
		p.kill()
		if b.Failed() {
			data, _ := os.ReadFile(p.log)
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			b.Logf("--- last lines of the %s log ---\n%s", p.name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) await(b *testing.B, ch <-chan time.Time, timeout time.Duration, what string) time.Time {
	b.Helper()
	select {
	case at := <-ch:
		return at
	case <-p.done:
		b.Fatalf("%s exited (%v) while waiting for %s", p.name, p.cmd.ProcessState, what)
	case <-time.After(timeout):
		b.Fatalf("%s: no %s within %s", p.name, what, timeout)
	}
	return time.Time{}
}

func (p *process) stop(b *testing.B) {
	b.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.kill()
		b.Errorf("%s did not exit within %s of SIGTERM", p.name, stopTimeout)
	}
}

func (p *process) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) memory(b *testing.B) (rss, hwm int64) {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		field, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (field != "VmRSS" && field != "VmHWM") {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if field == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// anonRSS returns RssAnon: heap, stacks and runtime memory, without the executable's
// file-backed pages that VmRSS also counts.
func (p *process) anonRSS(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (p *process) sampleRSS(peak *int64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-p.done:
				return
			case <-t.C:
				if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)); err == nil {
					for line := range strings.SplitSeq(string(data), "\n") {
						if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
							kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
							*peak = max(*peak, kb<<10)
						}
					}
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (p *process) cpu(b *testing.B) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * (time.Second / 100)
}

// buildOurs compiles the controller as it ships (static, stripped) into the benchmark's
// temporary directory.
func buildOurs(b *testing.B) (string, error) {
	b.Helper()
	out := filepath.Join(b.TempDir(), "nodelifecycle-controller")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "github.com/kcm-split/kcm-split/services/nodelifecycle/cmd/nodelifecycle-controller")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("building nodelifecycle-controller: %v", err)
	}
	return out, nil
}

func progress(name string) func(string, ...any) {
	start := time.Now()
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench %-26s %6.1fs  %s\n", name, time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }
func mib(n int64) string        { return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20)) }

func (r *result) report(b *testing.B) {
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(msf(percentile(r.overshoot, 50)), "overshoot-p50-ms")
	b.ReportMetric(msf(percentile(r.overshoot, 99)), "overshoot-p99-ms")
	b.ReportMetric(float64(r.falsePos), "false-positives")
	b.ReportMetric(float64(r.idleRSS)/(1<<20), "idle-rss-MiB")
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
	over := func(r *result) []time.Duration { return r.overshoot }
	taint := func(r *result) []time.Duration { return r.taintDelay }
	rows := []row{
		{"node setup, context (s)", func(r *result) float64 { return r.setup.Seconds() }, "%.1f"},
		{"cold sync: admission taints lifted (s)", func(r *result) float64 { return r.coldSync.Seconds() }, "%.2f"},
		{fmt.Sprintf("idle CPU over %s (s)", steady), func(r *result) float64 { return r.idleCPU.Seconds() }, "%.2f"},
		{"idle RSS (MiB)", func(r *result) float64 { return float64(r.idleRSS) / (1 << 20) }, "%.1f"},
		{"  of which anonymous, RssAnon (MiB)", func(r *result) float64 { return float64(r.idleAnon) / (1 << 20) }, "%.1f"},
		{"detection overshoot p50 (ms)", pct(over, 50), "%.0f"},
		{"detection overshoot p99 (ms)", pct(over, 99), "%.0f"},
		{"detection overshoot max (ms)", pct(over, 100), "%.0f"},
		{"Unknown -> NoExecute taint p50 (ms)", pct(taint, 50), "%.0f"},
		{"stopped nodes tainted NoExecute", func(r *result) float64 { return float64(len(r.taintDelay)) }, "%.0f"},
		{fmt.Sprintf("false positives on the other %d (target 0)", numNodes-numStopped), func(r *result) float64 { return float64(r.falsePos) }, "%.0f"},
		{"peak RSS while nodes fail (MiB)", func(r *result) float64 { return float64(r.peakRSS) / (1 << 20) }, "%.1f"},
	}
	fmt.Fprintf(w, "\n%-44s  %26s  %24s  %14s\n", "metric", ours.name, upstream.name, "ours/upstream")
	fmt.Fprintf(w, "%s  %s  %s  %s\n", strings.Repeat("-", 44), strings.Repeat("-", 26), strings.Repeat("-", 24), strings.Repeat("-", 14))
	for _, rw := range rows {
		cell := func(r *result) string {
			if r == nil {
				return "n/a"
			}
			return fmt.Sprintf(rw.f, rw.get(r))
		}
		ratio := "n/a"
		if mine != nil && theirs != nil {
			a, t := rw.get(mine), rw.get(theirs)
			switch {
			case a == t:
				ratio = "="
			case t != 0:
				ratio = fmt.Sprintf("%.2f", a/t)
			}
		}
		fmt.Fprintf(w, "%-44s  %26s  %24s  %14s\n", rw.name, cell(mine), cell(theirs), ratio)
	}
}
