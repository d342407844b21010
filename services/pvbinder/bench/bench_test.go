// Package bench measures claim binding under a burst: 1,000 static PV/PVC pairs created at
// 100 pairs/s against a real etcd + kube-apiserver (shared/testenv), for pv-binder-controller
// at upstream's client budget (20 QPS / 30 burst), for pv-binder-controller at its own
// default budget, and for upstream kube-controller-manager v1.36 running only its binder at
// 20/30. README.md explains each number. Timings are reported, never asserted; the benchmark
// fails only when a binder is broken: claims never bind, a process dies, or a PV ends bound
// to two claims.
package bench

import (
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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Scenario size and pacing, fixed so runs compare.
const (
	numPairs = 1000
	// pairInterval paces creation at 100 pairs/s, as the issue specifies.
	pairInterval = 10 * time.Millisecond
	// createWorkers bounds in-flight creates so a slow apiserver cannot make the creator
	// pile up goroutines; 32 keeps 100 pairs/s with room to spare.
	createWorkers = 32
	bindTimeout   = 15 * time.Minute
	stopTimeout   = 30 * time.Second

	benchNS = "bench"
	probeNS = "bench-probe"
	class   = "bench"
	// pvPrefix names the benchmark's PVs, which are cluster scoped; writes are counted on
	// those and on the claims in benchNS.
	pvPrefix = "bench-"
)

// side is one binder configuration.
type side struct {
	name      string
	userAgent string
	// qps is the client budget as a label, and its number for the writes/QPS floor (0:
	// no floor shown).
	budget string
	qps    float64
	binary func(b *testing.B) (string, error)
	args   func(kubeconfig string) []string
}

func oursArgs(extra ...string) func(string) []string {
	return func(kubeconfig string) []string {
		port, _ := testenv.FreePort()
		return append([]string{
			"--kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			// Plain HTTP metrics on a free port; no fixed secure port to collide on.
			"--secure-port=0",
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
			"--log-level=info",
		}, extra...)
	}
}

var sides = []side{
	{
		name: "pv-binder-controller", budget: "20/30", qps: 20, userAgent: "pv-binder-controller/",
		binary: buildOurs, args: oursArgs("--kube-api-qps=20", "--kube-api-burst=30"),
	},
	{
		name: "pv-binder-controller", budget: "default", userAgent: "pv-binder-controller/",
		binary: buildOurs, args: oursArgs(),
	},
	{
		name: "kube-controller-manager", budget: "20/30", qps: 20,
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
		args: func(kubeconfig string) []string {
			return []string{
				"--kubeconfig=" + kubeconfig,
				"--controllers=persistentvolume-binder-controller",
				"--leader-elect=false",
				"--use-service-account-credentials=false",
				"--secure-port=0",
				"--kube-api-qps=20", "--kube-api-burst=30",
				"--v=1",
			}
		},
	},
}

func (s side) label() string { return s.name + " " + s.budget }

func BenchmarkPVBinder(b *testing.B) {
	results := map[string]*result{}
	for _, s := range sides {
		b.Run(strings.ReplaceAll(s.label(), "/", "-"), func(b *testing.B) {
			r := results[s.label()]
			if r == nil {
				r = runScenario(b, s)
				results[s.label()] = r
			}
			r.report(b)
		})
	}
	printTable(os.Stdout, results)
}

// result is what one scenario measured.
type result struct {
	latencies  []time.Duration // claim create answered -> watcher sees it Bound
	total      time.Duration   // first create sent -> last claim seen Bound
	createTime time.Duration   // first create sent -> last create answered
	writes     int             // PV and claim writes by the binder, failed ones included
	conflicts  int             // of which answered 409 Conflict
	events     int             // Event writes by the binder (context)
	doubles    int             // PVs bound to more than one claim, claims to more than one PV
	cpu        time.Duration
	peakRSS    int64
	qps        float64
}

func runScenario(b *testing.B, s side) *result {
	logf := progress(s.label())
	bin, err := s.binary(b)
	if err != nil {
		b.Skipf("%s cannot run: %v", s.name, err)
	}
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		b.Fatalf("starting the control plane: %v", err)
	}
	defer env.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := newClient(b, env.Config, "kcm-split-bench/fixtures")
	for _, ns := range []string{benchNS, probeNS} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}

	proc := startProcess(b, s, bin, s.args(env.Kubeconfig))
	// A probe pair shows the binder is up and synced, the same way for both binaries.
	// The PV goes first and is Available before the claim exists, so even a binder that
	// only retries on its periodic resync binds it at once.
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, makePV("probe"), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitUntil(b, proc, 2*time.Minute, "the probe PV Available", func() bool {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, "probe", metav1.GetOptions{})
		return err == nil && pv.Status.Phase == corev1.VolumeAvailable
	})
	if _, err := client.CoreV1().PersistentVolumeClaims(probeNS).Create(ctx, makeClaim(probeNS, "probe"), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitUntil(b, proc, 2*time.Minute, "the probe claim Bound", func() bool {
		c, err := client.CoreV1().PersistentVolumeClaims(probeNS).Get(ctx, "probe", metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound
	})
	logf("binder up; creating %d pairs at %.0f/s", numPairs, float64(time.Second)/float64(pairInterval))

	// Watch claims; note when each is first seen Bound.
	var mu sync.Mutex
	boundAt := map[string]time.Time{}
	allBound := make(chan struct{})
	factory := informers.NewSharedInformerFactoryWithOptions(newClient(b, env.Config, "kcm-split-bench/watch"), 0, informers.WithNamespace(benchNS))
	inf := factory.Core().V1().PersistentVolumeClaims().Informer()
	observe := func(obj any) {
		at := time.Now()
		c, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok || c.Status.Phase != corev1.ClaimBound {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := boundAt[c.Name]; !seen {
			boundAt[c.Name] = at
			if len(boundAt) == numPairs {
				close(allBound)
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, o any) { observe(o) }}); err != nil {
		b.Fatal(err)
	}
	factory.Start(ctx.Done())
	// Stop the informer before waiting for it (defers run last-in first-out).
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("the benchmark's informer never synced")
	}

	cpu0 := proc.cpu(b)
	created := make([]time.Time, numPairs)
	start := time.Now()
	var lastCreate time.Time
	var wg sync.WaitGroup
	next := make(chan int)
	var createErr error
	var errMu sync.Mutex
	for range createWorkers {
		wg.Go(func() {
			for i := range next {
				_, err1 := client.CoreV1().PersistentVolumes().Create(ctx, makePV(fmt.Sprintf("%s%04d", pvPrefix, i)), metav1.CreateOptions{})
				_, err2 := client.CoreV1().PersistentVolumeClaims(benchNS).Create(ctx, makeClaim(benchNS, fmt.Sprintf("c%04d", i)), metav1.CreateOptions{})
				at := time.Now()
				mu.Lock()
				created[i] = at
				if at.After(lastCreate) {
					lastCreate = at
				}
				mu.Unlock()
				if err := errors.Join(err1, err2); err != nil {
					errMu.Lock()
					createErr = errors.Join(createErr, err)
					errMu.Unlock()
				}
			}
		})
	}
	tick := time.NewTicker(pairInterval)
	for i := range numPairs {
		next <- i
		<-tick.C
	}
	tick.Stop()
	close(next)
	wg.Wait()
	if createErr != nil {
		b.Fatalf("creating pairs: %v", createErr)
	}
	logf("created in %s", time.Since(start).Round(time.Millisecond))

	select {
	case <-allBound:
	case <-proc.done:
		b.Fatalf("%s exited while binding:\n%s", s.name, proc.tail(30))
	case <-time.After(bindTimeout):
		mu.Lock()
		n := len(boundAt)
		mu.Unlock()
		b.Fatalf("%s: only %d of %d claims bound within %s", s.name, n, numPairs, bindTimeout)
	}
	r := &result{qps: s.qps}
	mu.Lock()
	last := start
	for i := range numPairs {
		at := boundAt[fmt.Sprintf("c%04d", i)]
		r.latencies = append(r.latencies, max(0, at.Sub(created[i])))
		if at.After(last) {
			last = at
		}
	}
	r.total = last.Sub(start)
	r.createTime = lastCreate.Sub(start)
	mu.Unlock()
	logf("all bound after %s: p50 %s p99 %s", r.total.Round(time.Millisecond), percentile(r.latencies, 50).Round(time.Millisecond), percentile(r.latencies, 99).Round(time.Millisecond))

	// Let trailing writes land (phase updates by the volume loop), then count.
	time.Sleep(3 * time.Second)
	r.cpu = proc.cpu(b) - cpu0
	r.peakRSS = proc.peakRSS()
	evs, err := env.Writes(testenv.ByUserAgentPrefix(s.userAgent))
	if err != nil {
		b.Fatal(err)
	}
	for _, ev := range evs {
		mine := (ev.ObjectRef.Resource == "persistentvolumes" && strings.HasPrefix(ev.ObjectRef.Name, pvPrefix)) ||
			(ev.ObjectRef.Resource == "persistentvolumeclaims" && ev.ObjectRef.Namespace == benchNS)
		switch {
		case mine:
			r.writes++
			if ev.ResponseStatus.Code == 409 {
				r.conflicts++
			}
		case ev.ObjectRef.Resource == "events":
			r.events++
		}
	}
	r.doubles = doubleBinds(ctx, b, client)
	if r.doubles > 0 {
		b.Errorf("%s: %d double binds", s.name, r.doubles)
	}
	proc.stop(b)
	return r
}

// doubleBinds counts PVs whose claim is bound elsewhere or claimed twice, and claims bound to
// a PV that does not name them.
func doubleBinds(ctx context.Context, b *testing.B, client kubernetes.Interface) int {
	pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	claims, err := client.CoreV1().PersistentVolumeClaims(benchNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	byPV := map[string]corev1.PersistentVolume{}
	for _, pv := range pvs.Items {
		byPV[pv.Name] = pv
	}
	bad := 0
	onPV := map[string]int{}
	for _, c := range claims.Items {
		onPV[c.Spec.VolumeName]++
		pv, ok := byPV[c.Spec.VolumeName]
		if !ok || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != c.UID {
			bad++
		}
	}
	for _, n := range onPV {
		if n > 1 {
			bad += n - 1
		}
	}
	return bad
}

func makePV(name string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
		},
	}
}

func makeClaim(ns, name string) *corev1.PersistentVolumeClaim {
	cls := class
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: &cls,
		},
	}
}

func newClient(b *testing.B, base *rest.Config, userAgent string) kubernetes.Interface {
	b.Helper()
	cfg := rest.CopyConfig(base)
	cfg.UserAgent = userAgent
	// The fixtures must come at 100 pairs/s regardless of the client-side limiter.
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// ---- the binder process ----

type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProcess(b *testing.B, s side, bin string, args []string) *process {
	b.Helper()
	f, err := os.CreateTemp(b.TempDir(), s.name+"-*.log")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &process{name: s.name, cmd: cmd, log: f.Name(), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		f.Close()
		b.Fatalf("starting %s: %v", s.name, err)
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

func waitUntil(b *testing.B, p *process, timeout time.Duration, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-p.done:
			b.Fatalf("%s exited while waiting for %s:\n%s", p.name, what, p.tail(30))
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: no %s within %s", p.name, what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *process) stop(b *testing.B) {
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

// cpu returns the user + system CPU time the process has used so far.
func (p *process) cpu(b *testing.B) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatalf("%s: parsing /proc/<pid>/stat: %v", p.name, err)
	}
	return time.Duration(utime+stime) * (time.Second / 100) // USER_HZ is 100
}

// peakRSS returns VmHWM in bytes, or 0 when it cannot be read.
func (p *process) peakRSS() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// buildOurs compiles pv-binder-controller as it ships.
var (
	buildMu  sync.Mutex
	buildOut string
)

func buildOurs(b *testing.B) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildOut != "" {
		return buildOut, nil
	}
	dir, err := os.MkdirTemp("", "pvbinder-bench-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "pv-binder-controller")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "github.com/kcm-split/kcm-split/services/pvbinder/cmd/pv-binder-controller")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("building pv-binder-controller: %v", err)
	}
	buildOut = out
	return out, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildOut != "" {
		_ = os.RemoveAll(filepath.Dir(buildOut))
	}
	os.Exit(code)
}

// ---- reporting ----

func progress(name string) func(string, ...any) {
	start := time.Now()
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench %-34s %6.1fs  %s\n", name, time.Since(start).Seconds(), fmt.Sprintf(format, args...))
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

func (r *result) perBind() float64 { return float64(r.writes) / numPairs }
func (r *result) bindsPerSec() float64 {
	return numPairs / r.total.Seconds()
}

// floor is the least time the binder's writes take at its client QPS: writes / QPS.
func (r *result) floor() float64 {
	if r.qps == 0 {
		return 0
	}
	return float64(r.writes) / r.qps
}

func (r *result) report(b *testing.B) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(percentile(r.latencies, 50).Seconds(), "p50-s")
	b.ReportMetric(percentile(r.latencies, 99).Seconds(), "p99-s")
	b.ReportMetric(r.total.Seconds(), "total-s")
	b.ReportMetric(r.bindsPerSec(), "binds/s")
	b.ReportMetric(r.perBind(), "writes/bind")
	b.ReportMetric(float64(r.conflicts), "conflicts")
	b.ReportMetric(float64(r.doubles), "double-binds")
}

func printTable(w io.Writer, results map[string]*result) {
	type row struct {
		name string
		get  func(*result) string
	}
	sec := func(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }
	rows := []row{
		{"claim created -> Bound p50 (s)", func(r *result) string { return sec(percentile(r.latencies, 50)) }},
		{"claim created -> Bound p90 (s)", func(r *result) string { return sec(percentile(r.latencies, 90)) }},
		{"claim created -> Bound p99 (s)", func(r *result) string { return sec(percentile(r.latencies, 99)) }},
		{"claim created -> Bound max (s)", func(r *result) string { return sec(percentile(r.latencies, 100)) }},
		{"fixture creation, context (s)", func(r *result) string { return sec(r.createTime) }},
		{"total: first create -> all Bound (s)", func(r *result) string { return sec(r.total) }},
		{"writes / QPS floor (s)", func(r *result) string {
			if r.qps == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f", r.floor())
		}},
		{"total / floor", func(r *result) string {
			if r.qps == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", r.total.Seconds()/r.floor())
		}},
		{"binds/s", func(r *result) string { return fmt.Sprintf("%.1f", r.bindsPerSec()) }},
		{"PV + claim writes", func(r *result) string { return strconv.Itoa(r.writes) }},
		{"writes per bind", func(r *result) string { return fmt.Sprintf("%.2f", r.perBind()) }},
		{"409 conflicts", func(r *result) string { return strconv.Itoa(r.conflicts) }},
		{"Event writes (context)", func(r *result) string { return strconv.Itoa(r.events) }},
		{"double binds (target 0)", func(r *result) string { return strconv.Itoa(r.doubles) }},
		{"CPU while binding (s)", func(r *result) string { return fmt.Sprintf("%.1f", r.cpu.Seconds()) }},
		{"peak RSS (MiB)", func(r *result) string { return fmt.Sprintf("%.0f", float64(r.peakRSS)/(1<<20)) }},
	}
	width := len("metric")
	for _, x := range rows {
		width = max(width, len(x.name))
	}
	fmt.Fprintf(w, "\nPV binder benchmark: %d static PV/PVC pairs created at %.0f pairs/s\n\n", numPairs, float64(time.Second)/float64(pairInterval))
	fmt.Fprintf(w, "%-*s", width, "metric")
	for _, s := range sides {
		fmt.Fprintf(w, "  %32s", s.label())
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%s", strings.Repeat("-", width))
	for range sides {
		fmt.Fprintf(w, "  %32s", strings.Repeat("-", 32))
	}
	fmt.Fprintln(w)
	for _, x := range rows {
		fmt.Fprintf(w, "%-*s", width, x.name)
		for _, s := range sides {
			cell := "n/a"
			if r := results[s.label()]; r != nil {
				cell = x.get(r)
			}
			fmt.Fprintf(w, "  %32s", cell)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}
