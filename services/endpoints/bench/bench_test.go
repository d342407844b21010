// Package bench compares the endpoints-controller binary with upstream kube-controller-manager
// running only its endpoints controller, on the same scenario against a real etcd +
// kube-apiserver (shared/testenv), and prints a side-by-side table. README.md explains each
// number. Timings are reported, never asserted; the benchmark fails only when a controller is
// functionally broken (Endpoints never converge, a process dies, no writes are audited).
package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Scenario size and pacing. Fixed, so runs are comparable with each other.
const (
	numServices    = 200
	podsPerService = 10
	numFlips       = 500
	floorSamples   = 200
	// createWorkers is the fixture-creation concurrency: fast enough to set up 2,000 Pods
	// in seconds, low enough not to starve the apiserver on a 2-core machine.
	createWorkers = 16
	// flipPause keeps the flip rate below both controllers' default client QPS (20/s), so
	// flip latency measures the controller, not its client-side rate limiter.
	flipPause  = 50 * time.Millisecond
	floorPause = 10 * time.Millisecond
	// idleSettle lets the controller finish whatever follows its cold sync (GC, trailing
	// events) before idle RSS and cold-sync writes are read.
	idleSettle = 5 * time.Second
	// quietSettle is how long to wait after the last expected write before counting, so
	// that a stray extra write is counted rather than missed.
	quietSettle = 2 * time.Second
	seed        = 20260101

	coldSyncTimeout = 3 * time.Minute
	flipTimeout     = 30 * time.Second
	restartTimeout  = 2 * time.Minute
	stopTimeout     = 30 * time.Second

	benchNS    = "bench"
	floorNS    = "bench-floor"
	sentinelNS = "bench-sentinel"

	// Defaults of both controllers, passed explicitly so the comparison is like for like.
	concurrentSyncs = "5"
	batchPeriod     = "0s"
	clientQPS       = 20
	clientBurst     = 30
)

// controllerUnderTest is one side of the comparison.
type controllerUnderTest struct {
	name string
	// userAgent is the prefix of the user agent its writes carry in the audit log.
	userAgent string
	// binary returns the executable; an error means it cannot run here (the side is skipped).
	binary func(b *testing.B) (string, error)
	// args returns the command line to run it against kubeconfig.
	args func(kubeconfig string) ([]string, error)
}

var ours = controllerUnderTest{
	name:      "endpoints-controller",
	userAgent: "endpoints-controller/",
	binary:    buildOurs,
	args: func(kubeconfig string) ([]string, error) {
		port, err := testenv.FreePort()
		if err != nil {
			return nil, err
		}
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
			"--concurrent-endpoint-syncs=" + concurrentSyncs,
			"--endpoint-updates-batch-period=" + batchPeriod,
			"--log-level=info",
		}, nil
	},
}

var upstream = controllerUnderTest{
	name: "kube-controller-manager",
	// Without --use-service-account-credentials every controller uses the kubeconfig's
	// identity, and client-go's default user agent starts with the binary's name.
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
	args: func(kubeconfig string) ([]string, error) {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=endpoints-controller",
			"--leader-elect=false",
			"--use-service-account-credentials=false",
			// No serving: nothing here scrapes it, and it would want certificates.
			"--secure-port=0",
			"--concurrent-endpoint-syncs=" + concurrentSyncs,
			"--endpoint-updates-batch-period=" + batchPeriod,
			"--v=1",
		}, nil
	},
}

func BenchmarkEndpoints(b *testing.B) {
	results := map[string]*result{}
	for _, c := range []controllerUnderTest{ours, upstream} {
		b.Run(c.name, func(b *testing.B) {
			// The scenario is minutes long and measures one process lifetime, so it runs
			// once per benchmark invocation; a larger b.N (-benchtime Nx) reuses it.
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

// ---- the scenario ----

// result holds everything one scenario measured.
type result struct {
	floor       []time.Duration // Pod status write -> watcher sees it
	setup       time.Duration   // creating the fixtures (context only)
	coldSync    time.Duration   // process start -> all Endpoints complete
	coldWrites  int             // Endpoints writes until idle
	coldCPU     time.Duration   // process CPU time at idle
	idleRSS     int64           // bytes
	idleAnon    int64           // RssAnon: the part of idleRSS that is not the binary's own pages
	flips       []time.Duration // Pod status write -> watcher sees the Endpoints change
	flipWrites  int             // Endpoints writes during the flips
	flipCPU     time.Duration   // process CPU time spent during the flips
	loadedRSS   int64           // max VmRSS sampled during the flips
	peakRSS     int64           // VmHWM at the end of the flips
	restartSync time.Duration   // restart -> sentinel Service has its Endpoints
	restartW    int             // Endpoints writes for the 200 Services after the restart
}

func runScenario(b *testing.B, c controllerUnderTest) *result {
	logf := progress(c.name)
	// Before the control plane starts: a missing binary skips quickly.
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
	for _, ns := range []string{benchNS, floorNS, sentinelNS} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatalf("creating namespace %s: %v", ns, err)
		}
	}
	watchClient := newClient(b, env.Config, "kcm-split-bench/watch")

	r := &result{}

	// 1. Floor: the same kind of write the flips make, seen by the same kind of watcher.
	r.floor = measureFloor(ctx, b, client, watchClient)
	logf("floor: p50 %s p99 %s", ms(percentile(r.floor, 50)), ms(percentile(r.floor, 99)))

	// 2. Fixtures, then the controller's cold sync.
	start = time.Now()
	pods := createFixtures(ctx, b, client)
	r.setup = time.Since(start)
	logf("created %d Services and %d Pods in %s", numServices, numServices*podsPerService, r.setup.Round(time.Millisecond))

	eps := newObserver[*corev1.Endpoints](ctx, b, watchClient, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Endpoints().Informer()
	})
	converged := eps.whenAll(func(objs map[string]*corev1.Endpoints) bool {
		n := 0
		for s := range numServices {
			if ep := objs[benchNS+"/"+serviceName(s)]; ep != nil && len(readyIPs(ep)) == podsPerService && len(notReadyIPs(ep)) == 0 {
				n++
			}
		}
		return n == numServices
	})
	proc := startController(b, c, bin, env.Kubeconfig)
	at := proc.await(b, converged, coldSyncTimeout, "all Endpoints complete after the cold sync")
	r.coldSync = at.Sub(proc.started)
	logf("cold sync: %s", r.coldSync.Round(time.Millisecond))

	// 3. Idle.
	time.Sleep(idleSettle)
	r.idleRSS, _ = proc.memory(b)
	r.idleAnon = proc.anonRSS(b)
	r.coldCPU = proc.cpu(b)
	r.coldWrites = countWrites(b, env, c.userAgent, benchNS)
	if r.coldWrites == 0 {
		b.Fatalf("the audit log holds no Endpoints writes by user agent %q although the Endpoints converged: did the user agent change?", c.userAgent)
	}
	logf("idle: rss %s, %d Endpoints writes", mib(r.idleRSS), r.coldWrites)

	// 4. Readiness flips.
	before := r.coldWrites
	cpuBefore := proc.cpu(b)
	stopSampling := proc.sampleRSS(&r.loadedRSS)
	r.flips = flip(ctx, b, client, eps, proc, pods)
	stopSampling()
	time.Sleep(quietSettle)
	r.flipCPU = proc.cpu(b) - cpuBefore
	_, r.peakRSS = proc.memory(b)
	r.flipWrites = countWrites(b, env, c.userAgent, benchNS) - before
	logf("flips: p50 %s p99 %s, %d writes", ms(percentile(r.flips, 50)), ms(percentile(r.flips, 99)), r.flipWrites)

	// 5. Warm restart: nothing changed, so a correct controller writes nothing.
	before = countWrites(b, env, c.userAgent, benchNS)
	proc.stop(b)
	proc = startController(b, c, bin, env.Kubeconfig)
	sentinelKey := sentinelNS + "/" + serviceName(0)
	sentinelIP := "10.255.0.1"
	sentinel := eps.when(sentinelKey, func(ep *corev1.Endpoints) bool { return slices.Contains(readyIPs(ep), sentinelIP) })
	// Created after the new process started, so it is queued behind the 200 Services of
	// the initial list (or listed with them): once it is synced, so are they.
	if _, err := client.CoreV1().Services(sentinelNS).Create(ctx, makeService(sentinelNS, 0), metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating the sentinel Service: %v", err)
	}
	if _, err := createPod(ctx, client, makePod(sentinelNS, 0, 0, sentinelIP)); err != nil {
		b.Fatalf("creating the sentinel Pod: %v", err)
	}
	at = proc.await(b, sentinel, restartTimeout, "the sentinel Service's Endpoints after the restart")
	r.restartSync = at.Sub(proc.started)
	time.Sleep(quietSettle)
	r.restartW = countWrites(b, env, c.userAgent, benchNS) - before
	logf("warm restart: sentinel synced after %s, %d Endpoints writes", r.restartSync.Round(time.Millisecond), r.restartW)
	proc.stop(b)
	return r
}

// measureFloor times one write-and-observe hop: UpdateStatus issued -> a watcher on Pods sees
// the new status. A controller makes exactly such a hop (its Endpoints write, seen by our
// watcher) after it learns of a Pod change, so this bounds flip latency from below. It is
// timed from the request, not the response: the apiserver sends the watch event and the
// response together, so response -> event is about zero and says nothing.
func measureFloor(ctx context.Context, b *testing.B, client, watchClient kubernetes.Interface) []time.Duration {
	b.Helper()
	pod, err := createPod(ctx, client, makePod(floorNS, 0, 0, "10.254.0.1"))
	if err != nil {
		b.Fatalf("creating the floor Pod: %v", err)
	}
	obs := newObserver[*corev1.Pod](ctx, b, watchClient, floorNS, func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Pods().Informer()
	})
	key := floorNS + "/" + pod.Name
	out := make([]time.Duration, 0, floorSamples)
	for range floorSamples {
		ready := !isReady(pod)
		next := pod.DeepCopy()
		setReady(next, ready)
		seen := obs.when(key, func(p *corev1.Pod) bool { return isReady(p) == ready })
		issued := time.Now()
		pod, err = client.CoreV1().Pods(floorNS).UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			b.Fatalf("floor: updating Pod status: %v", err)
		}
		select {
		case at := <-seen:
			out = append(out, at.Sub(issued))
		case <-time.After(flipTimeout):
			b.Fatalf("floor: the watcher never saw Pod %s turn ready=%v", key, ready)
		}
		time.Sleep(floorPause)
	}
	return out
}

// flip turns the readiness of numFlips Pods, one at a time, and times UpdateStatus response ->
// a watcher on Endpoints sees the Pod's address move to the other list. The controller learns
// of the change about when the response arrives, so this is its reaction time plus one
// write-and-observe hop (the floor).
func flip(ctx context.Context, b *testing.B, client kubernetes.Interface, eps *observer[*corev1.Endpoints], proc *process, pods [][]*corev1.Pod) []time.Duration {
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
		seen := eps.when(benchNS+"/"+serviceName(s), func(ep *corev1.Endpoints) bool {
			if ready {
				return slices.Contains(readyIPs(ep), ip)
			}
			return slices.Contains(notReadyIPs(ep), ip)
		})
		updated, err := client.CoreV1().Pods(benchNS).UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			b.Fatalf("flip: updating Pod %s status: %v", pod.Name, err)
		}
		done := time.Now()
		at := proc.await(b, seen, flipTimeout, fmt.Sprintf("Pod %s (%s) as ready=%v in Endpoints %s", pod.Name, ip, ready, serviceName(s)))
		out = append(out, nonNegative(at.Sub(done)))
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

// createFixtures creates the Services and their Pods and returns the Pods as last written,
// indexed [service][pod], so flips can update them without reading them back.
func createFixtures(ctx context.Context, b *testing.B, client kubernetes.Interface) [][]*corev1.Pod {
	b.Helper()
	err := parallel(ctx, numServices, createWorkers, func(ctx context.Context, s int) error {
		_, err := client.CoreV1().Services(benchNS).Create(ctx, makeService(benchNS, s), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating Services: %v", err)
	}
	pods := make([][]*corev1.Pod, numServices)
	for s := range pods {
		pods[s] = make([]*corev1.Pod, podsPerService)
	}
	err = parallel(ctx, numServices*podsPerService, createWorkers, func(ctx context.Context, n int) error {
		s, i := n/podsPerService, n%podsPerService
		p, err := createPod(ctx, client, makePod(benchNS, s, i, podIP(s, i)))
		pods[s][i] = p
		return err
	})
	if err != nil {
		b.Fatalf("creating Pods: %v", err)
	}
	return pods
}

// parallel runs fn for 0..n-1 on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
}

func readyIPs(ep *corev1.Endpoints) []string {
	return subsetIPs(ep, func(s corev1.EndpointSubset) []corev1.EndpointAddress { return s.Addresses })
}

func notReadyIPs(ep *corev1.Endpoints) []string {
	return subsetIPs(ep, func(s corev1.EndpointSubset) []corev1.EndpointAddress { return s.NotReadyAddresses })
}

func subsetIPs(ep *corev1.Endpoints, pick func(corev1.EndpointSubset) []corev1.EndpointAddress) []string {
	var out []string
	for _, s := range ep.Subsets {
		for _, a := range pick(s) {
			out = append(out, a.IP)
		}
	}
	return out
}

func newClient(b *testing.B, base *rest.Config, userAgent string) kubernetes.Interface {
	b.Helper()
	cfg := rest.CopyConfig(base)
	cfg.UserAgent = userAgent
	// Protobuf, as both controllers use: the watcher should not be the slow part.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// countWrites counts the Endpoints writes the controller (by user agent) made in ns. The
// audit log is written in blocking mode, so every answered write is already in it. Failed
// writes count too: they cost the apiserver as much.
func countWrites(b *testing.B, env *testenv.Env, userAgent, ns string) int {
	b.Helper()
	evs, err := env.Writes(testenv.ByUserAgentPrefix(userAgent, "endpoints"))
	if err != nil {
		b.Fatalf("reading the audit log: %v", err)
	}
	n := 0
	for _, ev := range evs {
		if ev.ObjectRef.Namespace == ns {
			n++
		}
	}
	return n
}

// ---- watching ----

// observer mirrors one resource through an informer and tells waiters when the mirror first
// satisfies their condition, with the time the informer delivered the event that made it so.
// Waiters register before the write they wait for, so no event can slip between.
type observer[T metav1.Object] struct {
	mu      sync.Mutex
	objs    map[string]T
	waiters []*waiter[T]
}

type waiter[T metav1.Object] struct {
	key string       // "" means the condition is on all objects
	one func(T) bool // when key != ""
	all func(map[string]T) bool
	ch  chan time.Time // buffered: firing never blocks the informer
}

func newObserver[T metav1.Object](ctx context.Context, b *testing.B, client kubernetes.Interface, ns string, informer func(informers.SharedInformerFactory) cache.SharedIndexInformer) *observer[T] {
	b.Helper()
	o := &observer[T]{objs: map[string]T{}}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := informer(factory)
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.observe(obj, false) },
		UpdateFunc: func(_, obj any) { o.observe(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			o.observe(obj, true)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	factory.Start(ctx.Done())
	b.Cleanup(factory.Shutdown)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		b.Fatal("the benchmark's own informer never synced")
	}
	return o
}

func (o *observer[T]) observe(obj any, deleted bool) {
	at := time.Now()
	t, ok := obj.(T)
	if !ok {
		return
	}
	key := t.GetNamespace() + "/" + t.GetName()
	o.mu.Lock()
	defer o.mu.Unlock()
	if deleted {
		delete(o.objs, key)
	} else {
		o.objs[key] = t
	}
	o.waiters = slices.DeleteFunc(o.waiters, func(w *waiter[T]) bool {
		if w.key != "" && w.key != key {
			return false
		}
		if !o.holds(w) {
			return false
		}
		w.ch <- at
		return true
	})
}

// holds evaluates w under o.mu.
func (o *observer[T]) holds(w *waiter[T]) bool {
	if w.key == "" {
		return w.all(o.objs)
	}
	obj, ok := o.objs[w.key]
	return ok && w.one(obj)
}

func (o *observer[T]) register(w *waiter[T]) <-chan time.Time {
	w.ch = make(chan time.Time, 1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.holds(w) {
		// Already true: the caller registered too late to time it; say "now".
		w.ch <- time.Now()
	} else {
		o.waiters = append(o.waiters, w)
	}
	return w.ch
}

// when fires once the object key satisfies cond.
func (o *observer[T]) when(key string, cond func(T) bool) <-chan time.Time {
	return o.register(&waiter[T]{key: key, one: cond})
}

// whenAll fires once all observed objects together satisfy cond.
func (o *observer[T]) whenAll(cond func(map[string]T) bool) <-chan time.Time {
	return o.register(&waiter[T]{all: cond})
}

// ---- the controller process ----

type process struct {
	name    string
	cmd     *exec.Cmd
	log     string
	started time.Time
	done    chan struct{}
}

func startController(b *testing.B, c controllerUnderTest, bin, kubeconfig string) *process {
	b.Helper()
	args, err := c.args(kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.CreateTemp(b.TempDir(), c.name+"-*.log")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Never outlive the benchmark, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &process{name: c.name, cmd: cmd, log: f.Name(), done: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		b.Fatalf("starting %s: %v", c.name, err)
	}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	b.Cleanup(func() {
		p.kill()
		if b.Failed() {
			b.Logf("--- last lines of the %s log (%s) ---\n%s", p.name, p.log, p.tail(40))
		}
	})
	return p
}

// await waits for ch, failing the benchmark when the process exits or timeout passes first.
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

// stop sends SIGTERM and waits for a graceful exit.
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
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) tail(n int) string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// memory returns VmRSS and VmHWM (peak RSS) in bytes, failing b if it cannot read them.
func (p *process) memory(b *testing.B) (rss, hwm int64) {
	b.Helper()
	rss, hwm, err := p.readMemory()
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	return rss, hwm
}

func (p *process) readMemory() (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		field, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (field != "VmRSS" && field != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parsing %s %q: %w", field, value, err)
		}
		if field == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, errors.New("no VmRSS in /proc/<pid>/status")
	}
	return rss, hwm, sc.Err()
}

// anonRSS returns RssAnon: heap, stacks and runtime memory, without the file-backed pages of
// the executable that VmRSS also counts (clean, shared, and dropped first under pressure).
func (p *process) anonRSS(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("%s: parsing RssAnon %q: %v", p.name, v, err)
			}
			return kb << 10
		}
	}
	b.Fatalf("%s: no RssAnon in /proc/<pid>/status", p.name)
	return 0
}

// cpu returns the user + system CPU time the process has used so far.
func (p *process) cpu(b *testing.B) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	// The command name may hold spaces; fields are counted from the ")" that ends it.
	// After it come state (3), ..., utime (14) and stime (15).
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	fields := strings.Fields(rest)
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatalf("%s: parsing /proc/<pid>/stat: %v", p.name, err)
	}
	// Linux reports these in USER_HZ, which is 100 on every architecture Go supports.
	return time.Duration(utime+stime) * (time.Second / 100)
}

// sampleRSS keeps the largest VmRSS seen in *peak until the returned stop is called. A
// failed read is skipped: the process dying is reported by whoever waits on it.
func (p *process) sampleRSS(peak *int64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	sample := func() {
		if rss, _, err := p.readMemory(); err == nil && rss > *peak {
			*peak = rss
		}
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-p.done:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		sample()
	}
}

// ---- building our binary ----

// buildOurs compiles the endpoints-controller as it ships, into a directory removed when the
// benchmark ends. (testenv.Build keeps its binaries until testenv.Main cleans up, and this
// package does not start a control plane in TestMain: each side gets a fresh one.)
func buildOurs(b *testing.B) (string, error) {
	b.Helper()
	out := filepath.Join(b.TempDir(), "endpoints-controller")
	// Built as `make build` and the Dockerfile ship it (static, stripped), and as the tools
	// build upstream kube-controller-manager, so the RSS columns compare like with like.
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "github.com/kcm-split/kcm-split/services/endpoints/cmd/endpoints-controller")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("building endpoints-controller: %v", err)
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

// percentile returns the nearest-rank p-th percentile.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func nonNegative(d time.Duration) time.Duration { return max(0, d) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
func mib(n int64) string        { return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20)) }

func (r *result) perFlip() float64 { return float64(r.flipWrites) / float64(len(r.flips)) }

// report publishes the key numbers as benchmark metrics, so benchstat can compare runs.
func (r *result) report(b *testing.B) {
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(0, "ns/op") // one scenario per run: ns/op would only repeat the wall time
	b.ReportMetric(msf(percentile(r.floor, 50)), "floor-p50-ms")
	b.ReportMetric(r.coldSync.Seconds(), "cold-sync-s")
	b.ReportMetric(float64(r.coldWrites), "cold-writes")
	b.ReportMetric(float64(r.idleRSS)/(1<<20), "idle-rss-MiB")
	b.ReportMetric(msf(percentile(r.flips, 50)), "flip-p50-ms")
	b.ReportMetric(msf(percentile(r.flips, 99)), "flip-p99-ms")
	b.ReportMetric(r.perFlip(), "writes/flip")
	b.ReportMetric(float64(r.loadedRSS)/(1<<20), "loaded-rss-MiB")
	b.ReportMetric(float64(r.restartW), "restart-writes")
}

// printTable prints ours (mine) and upstream (theirs) side by side; either may be nil
// (skipped).
func printTable(w io.Writer, mine, theirs *result) {
	if mine == nil && theirs == nil {
		return
	}
	type row struct {
		name string
		get  func(*result) float64
		f    string // value format
	}
	msf := func(get func(*result) time.Duration) func(*result) float64 {
		return func(r *result) float64 { return float64(get(r)) / float64(time.Millisecond) }
	}
	pct := func(sel func(*result) []time.Duration, p float64) func(*result) float64 {
		return msf(func(r *result) time.Duration { return percentile(sel(r), p) })
	}
	floor := func(r *result) []time.Duration { return r.floor }
	flips := func(r *result) []time.Duration { return r.flips }
	mb := func(get func(*result) int64) func(*result) float64 {
		return func(r *result) float64 { return float64(get(r)) / (1 << 20) }
	}
	rows := []row{
		{"floor latency p50 (ms)", pct(floor, 50), "%.1f"},
		{"floor latency p99 (ms)", pct(floor, 99), "%.1f"},
		{"fixture setup, context (s)", func(r *result) float64 { return r.setup.Seconds() }, "%.1f"},
		{"cold sync (s)", func(r *result) float64 { return r.coldSync.Seconds() }, "%.2f"},
		{fmt.Sprintf("cold sync Endpoints writes (target %d)", numServices), func(r *result) float64 { return float64(r.coldWrites) }, "%.0f"},
		{"cold sync CPU (s)", func(r *result) float64 { return r.coldCPU.Seconds() }, "%.2f"},
		{"idle RSS (MiB)", mb(func(r *result) int64 { return r.idleRSS }), "%.1f"},
		{"  of which anonymous, RssAnon (MiB)", mb(func(r *result) int64 { return r.idleAnon }), "%.1f"},
		{"flip latency p50 (ms)", pct(flips, 50), "%.1f"},
		{"flip latency p90 (ms)", pct(flips, 90), "%.1f"},
		{"flip latency p99 (ms)", pct(flips, 99), "%.1f"},
		{"flip latency max (ms)", pct(flips, 100), "%.1f"},
		{"writes per flip (target 1.00)", (*result).perFlip, "%.2f"},
		{"flips CPU (s)", func(r *result) float64 { return r.flipCPU.Seconds() }, "%.2f"},
		{"loaded RSS, max during flips (MiB)", mb(func(r *result) int64 { return r.loadedRSS }), "%.1f"},
		{"peak RSS, VmHWM (MiB)", mb(func(r *result) int64 { return r.peakRSS }), "%.1f"},
		{"warm restart -> sentinel synced (s)", func(r *result) float64 { return r.restartSync.Seconds() }, "%.2f"},
		{"warm restart Endpoints writes (target 0)", func(r *result) float64 { return float64(r.restartW) }, "%.0f"},
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
	line := func(a, b, c, d string) { fmt.Fprintf(w, "%-*s  %22s  %24s  %14s\n", width, a, b, c, d) }
	fmt.Fprintf(w, "\nEndpoints benchmark: %d Services x %d Pods, %d readiness flips, --concurrent-endpoint-syncs=%s, --endpoint-updates-batch-period=%s\n\n",
		numServices, podsPerService, numFlips, concurrentSyncs, batchPeriod)
	line("metric", ours.name, upstream.name, "ours/upstream")
	line(strings.Repeat("-", width), strings.Repeat("-", 22), strings.Repeat("-", 24), strings.Repeat("-", 14))
	for _, x := range rows {
		line(x.name, cell(mine, x), cell(theirs, x), ratio(x))
	}
	fmt.Fprintf(w, "\nLower is better everywhere; README.md defines each row. Both clients default to %d QPS / %d burst, so creating %d Endpoints takes at least %.1fs of client-side throttling.\n\n",
		clientQPS, clientBurst, numServices, float64(numServices-clientBurst)/clientQPS)
}
