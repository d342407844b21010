package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/benchkit"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// The EndpointSlice scenario's size and pacing (README.md, "EndpointSlices").
const (
	sliceServices       = 1000
	slicePodsPerService = 20
	sliceFlips          = 500
	// sliceFlipPause keeps the flips well inside the client budget although ours writes twice
	// per flip (the Endpoints and the slice, from one budget): about 12 flips a second.
	sliceFlipPause = 75 * time.Millisecond
	// sliceNodes are the Nodes the Pods run on, in three zones: the EndpointSlice controller
	// skips (and retries) Pods whose Node it does not know.
	sliceNodes = 20

	// The "Deployment" rolled in the last phase: its Pods, and upstream's default
	// maxSurge and maxUnavailable of 25%.
	deployNS       = "bench-deploy"
	deployService  = "web"
	deployReplicas = 1000
	maxSurge       = deployReplicas / 4
	maxUnavailable = deployReplicas / 4

	// The client budget of both sides: the endpoints binary's default, which upstream's
	// endpointslice-controller is given too (its default is 20 QPS / 30 burst).
	sliceQPS   = 40
	sliceBurst = 60

	sliceColdSyncTimeout = 10 * time.Minute
	rolloutTimeout       = 5 * time.Minute
	preludeTimeout       = 5 * time.Minute
)

const endpointsPkg = "github.com/kcm-split/kcm-split/services/endpoints/cmd/endpoints-controller"

// sliceFlags are the EndpointSlice controller's settings, upstream's defaults, and the client
// budget, on both sides.
var sliceFlags = []string{
	"--concurrent-service-endpoint-syncs=5",
	"--max-endpoints-per-slice=100",
	"--endpointslice-updates-batch-period=0s",
	"--kube-api-qps=" + strconv.Itoa(sliceQPS),
	"--kube-api-burst=" + strconv.Itoa(sliceBurst),
}

// The two sides: the endpoints binary as it ships (every controller it runs on) and upstream
// kube-controller-manager running only its endpointslice-controller.
var (
	slicesOurs     = benchkit.Ours("endpoints-controller", endpointsPkg, sliceFlags...)
	slicesUpstream = benchkit.UpstreamSide("endpointslice-controller", sliceFlags...)
)

func BenchmarkEndpointSlices(b *testing.B) {
	// Built once: it is our side, and on both sides it writes the Endpoints beforehand.
	oursBin := benchkit.BuildShipped(b, endpointsPkg)
	ours := slicesOurs
	ours.Binary = func(testing.TB) (string, error) { return oursBin, nil }
	run := func(b *testing.B, s benchkit.Side) *sliceResult { return runSliceScenario(b, s, oursBin) }
	r := benchkit.RunSides(b, []benchkit.Side{ours, slicesUpstream}, benchkit.Side.Label, run, (*sliceResult).report)
	printSliceTable(os.Stdout, r[0], r[1])
}

// sliceResult holds everything one run of the EndpointSlice scenario measured.
type sliceResult struct {
	cold           benchkit.ColdStart // Writes are EndpointSlice writes, target one per Service
	coldEndpointsW int                // Endpoints writes during the cold sync (pre-written: 0)
	firstWrite     time.Duration      // process start -> the apiserver receives its first slice write
	flips          []time.Duration    // Pod status write -> watcher sees the slice's ready condition change
	flipWrites     int                // EndpointSlice writes during the flips
	flipCPU        time.Duration
	rollout        time.Duration // first write of the rolling update -> its slices seen complete
	rolloutDriven  time.Duration // first to last write of the simulated rollout (context)
	rolloutWrites  int           // EndpointSlice writes of the Deployment's Service during it
	rolloutCPU     time.Duration
	loadedRSS      int64 // max VmRSS sampled during the flips and the rolling update
	peakRSS        int64 // VmHWM at the end
}

// Over 80 lines: the numbered phases (floor, fixtures, Endpoints, cold sync, flips, rolling update) measured on one process into one result.
func runSliceScenario(b *testing.B, c benchkit.Side, oursBin string) *sliceResult {
	// 1. Floor.
	sc := begin(b, c, benchNS, deployNS)
	defer sc.stop()
	bin, env, logf, ctx, client, watchClient := sc.bin, sc.env, sc.logf, sc.ctx, sc.client, sc.watchClient
	r := &sliceResult{}
	r.cold.Floor = sc.floor

	// 2. Fixtures: Nodes, Services, Pods.
	start := time.Now()
	createNodes(ctx, b, client)
	pods := createFixtures(ctx, b, client, sliceServices, slicePodsPerService, func(s, i int) *corev1.Pod {
		return workloadPod(makePod(benchNS, s, i, podIP(s, i)), serviceName(s)+"-7d4b9c")
	}, logf)
	r.cold.Setup = time.Since(start)
	logf("created %d Nodes, %d Services and %d Pods in %s", sliceNodes, sliceServices, sliceServices*slicePodsPerService, r.cold.Setup.Round(time.Millisecond))

	// 3. The Endpoints, written beforehand as in a cluster switching over from
	// kube-controller-manager: our binary's Endpoints controller then has nothing to write,
	// and both sides' cold sync spends the same budget on EndpointSlices alone.
	writeEndpoints(ctx, b, env, watchClient, oursBin, logf)
	endpointsBefore := countWrites(b, env, "endpoints", c.UserAgent, benchNS)

	// 4. Cold sync.
	slices := benchkit.NewObserver[*discovery.EndpointSlice](ctx, b, watchClient, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Discovery().V1().EndpointSlices().Informer()
	})
	converged := slices.WhenAll(slicesComplete(sliceServices, slicePodsPerService))
	prof := profiler(b, c, env)
	proc := c.Start(b, bin, env.Kubeconfig, prof.flags...)
	at := proc.Await(converged, sliceColdSyncTimeout, "all EndpointSlices complete after the cold sync")
	r.cold.Sync = at.Sub(proc.Started)
	logf("cold sync: %s", r.cold.Sync.Round(time.Millisecond))
	r.cold.SettleIdle(proc)
	coldWrites := benchkit.Writes(b, env, testenv.ByUserAgentPrefix(c.UserAgent, "endpointslices"), benchkit.InNamespace(benchNS))
	r.cold.Writes = len(coldWrites)
	if r.cold.Writes == 0 {
		b.Fatalf("the audit log holds no EndpointSlice writes by user agent %q although the slices converged: did the user agent change?", c.UserAgent)
	}
	r.coldEndpointsW = countWrites(b, env, "endpoints", c.UserAgent, benchNS) - endpointsBefore
	first := coldWrites[0].RequestReceivedTimestamp
	for _, ev := range coldWrites {
		if ev.RequestReceivedTimestamp.Before(first) {
			first = ev.RequestReceivedTimestamp
		}
	}
	r.firstWrite = first.Sub(proc.Started)
	logf("idle: rss %s, %d EndpointSlice writes, %d Endpoints writes", benchkit.MiBString(r.cold.IdleRSS), r.cold.Writes, r.coldEndpointsW)
	prof.save("idle")

	// 5. Readiness flips.
	before := r.cold.Writes
	cpuBefore := proc.CPU()
	stopSampling := proc.SampleRSS(&r.loadedRSS, 50*time.Millisecond)
	defer stopSampling()
	cpuProfiled := prof.cpu("flips", 20*time.Second)
	r.flips = flipSlices(ctx, b, client, slices, proc, pods)
	<-cpuProfiled
	time.Sleep(benchkit.QuietSettle)
	r.flipCPU = proc.CPU() - cpuBefore
	r.flipWrites = countWrites(b, env, "endpointslices", c.UserAgent, benchNS) - before
	logf("flips: p50 %s p99 %s, %d EndpointSlice writes", benchkit.MS(benchkit.Percentile(r.flips, 50)), benchkit.MS(benchkit.Percentile(r.flips, 99)), r.flipWrites)

	// 6. Rolling update of a 1,000-Pod Deployment.
	old := deployRevision(ctx, b, client, slices, proc)
	before = countWrites(b, env, "endpointslices", c.UserAgent, deployNS)
	cpuBefore = proc.CPU()
	done := slices.WhenAll(deployComplete(2))
	start = time.Now()
	rollingUpdate(ctx, b, client, old, logf)
	r.rolloutDriven = time.Since(start)
	at = proc.Await(done, rolloutTimeout, "the Deployment's EndpointSlices listing only its new Pods")
	r.rollout = at.Sub(start)
	time.Sleep(benchkit.QuietSettle)
	r.rolloutCPU = proc.CPU() - cpuBefore
	r.rolloutWrites = countWrites(b, env, "endpointslices", c.UserAgent, deployNS) - before
	if r.rolloutWrites == 0 {
		b.Fatal("no EndpointSlice writes during the rolling update although its slices converged")
	}
	stopSampling()
	r.peakRSS = proc.Memory().HWM
	prof.save("loaded")
	logf("rolling update: driven in %s, slices complete after %s, %d EndpointSlice writes", r.rolloutDriven.Round(time.Millisecond), r.rollout.Round(time.Millisecond), r.rolloutWrites)
	proc.Shutdown()
	prof.keepLog(proc)
	return r
}

// writeEndpoints runs our binary's Endpoints controller alone, with a generous budget, until
// every Service's Endpoints are complete, then stops it.
func writeEndpoints(ctx context.Context, b *testing.B, env *testenv.Env, watchClient kubernetes.Interface, oursBin string, logf func(string, ...any)) {
	b.Helper()
	eps := benchkit.NewObserver[*corev1.Endpoints](ctx, b, watchClient, benchNS, func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Endpoints().Informer()
	})
	complete := eps.WhenAll(endpointsComplete(sliceServices, slicePodsPerService))
	args, _, err := benchkit.OursArgs(env.Kubeconfig, "--controllers=endpoints-controller", "--kube-api-qps=500", "--kube-api-burst=1000")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	proc := benchkit.Start(b, "endpoints-beforehand", oursBin, args...)
	proc.Await(complete, preludeTimeout, "every Service's Endpoints written beforehand")
	proc.Shutdown()
	logf("Endpoints written beforehand in %s", time.Since(start).Round(time.Millisecond))
}

// flipSlices turns the readiness of sliceFlips Pods, one at a time, and times UpdateStatus
// response -> a watcher on EndpointSlices sees the Pod's endpoint with the new ready condition.
func flipSlices(ctx context.Context, b *testing.B, client kubernetes.Interface, slices *benchkit.Observer[*discovery.EndpointSlice], proc *benchkit.Process, pods [][]*corev1.Pod) []time.Duration {
	b.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	out := make([]time.Duration, 0, sliceFlips)
	for range sliceFlips {
		s, i := rng.IntN(sliceServices), rng.IntN(slicePodsPerService)
		pod := pods[s][i]
		ip := pod.Status.PodIP
		ready := !isReady(pod)
		next := pod.DeepCopy()
		setReady(next, ready)
		svc := serviceName(s)
		seen := slices.WhenAny(func(sl *discovery.EndpointSlice) bool {
			if sl.Namespace != benchNS || sl.Labels[discovery.LabelServiceName] != svc {
				return false
			}
			for _, ep := range sl.Endpoints {
				if len(ep.Addresses) > 0 && ep.Addresses[0] == ip {
					return endpointReady(ep) == ready
				}
			}
			return false
		})
		updated, err := client.CoreV1().Pods(benchNS).UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			b.Fatalf("flip: updating Pod %s status: %v", pod.Name, err)
		}
		done := time.Now()
		at := proc.Await(seen, flipTimeout, fmt.Sprintf("Pod %s (%s) as ready=%v in the EndpointSlices of %s", pod.Name, ip, ready, svc))
		out = append(out, max(0, at.Sub(done)))
		pods[s][i] = updated
		time.Sleep(sliceFlipPause)
	}
	return out
}

// profiles saves our binary's heap and CPU profiles when $KCM_SPLIT_BENCH_PPROF names a
// directory: its side then serves /debug/pprof on a loopback secure port (flags), read with
// the control plane's admin token.
type profiles struct {
	b     *testing.B
	flags []string
	url   string
	token string
	dir   string
}

func profiler(b *testing.B, c benchkit.Side, env *testenv.Env) *profiles {
	h := &profiles{b: b, dir: os.Getenv("KCM_SPLIT_BENCH_PPROF")}
	if h.dir == "" || c.Name != slicesOurs.Name {
		return h
	}
	port, err := testenv.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	h.flags = []string{"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--profiling"}
	h.url = fmt.Sprintf("https://127.0.0.1:%d/debug/pprof/heap", port)
	h.token = env.Config.BearerToken
	return h
}

// save writes the heap profile to <dir>/heap-<name>.pb.gz; a failure is logged, not fatal.
func (h *profiles) save(name string) { h.fetch(h.url, "heap-"+name) }

// keepLog copies the process's log beside the profiles.
func (h *profiles) keepLog(p *benchkit.Process) {
	if h.url == "" {
		return
	}
	if data, err := os.ReadFile(p.Log); err == nil {
		_ = os.WriteFile(filepath.Join(h.dir, p.Name+".log"), data, 0o644)
	}
}

// cpu takes a CPU profile of the next d into <dir>/cpu-<name>.pb.gz in the background; the
// channel closes when it is written (at once when profiles are off).
func (h *profiles) cpu(name string, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	if h.url == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		h.fetch(strings.TrimSuffix(h.url, "heap")+"profile?seconds="+strconv.Itoa(int(d.Seconds())), "cpu-"+name)
	}()
	return done
}

func (h *profiles) fetch(url, name string) {
	if h.url == "" {
		return
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		h.b.Logf("profile %s: %v", name, err)
		return
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // our own process on loopback
	}}
	resp, err := client.Do(req)
	if err != nil {
		h.b.Logf("profile %s: %v", name, err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		h.b.Logf("profile %s: HTTP %d, %v", name, resp.StatusCode, err)
		return
	}
	path := filepath.Join(h.dir, name+".pb.gz")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		h.b.Logf("profile %s: %v", name, err)
	}
}

// ---- the Deployment ----

// deployPod is Pod n of revision rev of the Deployment, Running and Ready on one of the Nodes.
func deployPod(rev, n int) *corev1.Pod {
	global := (rev-1)*deployReplicas + n
	p := makePod(deployNS, 0, 0, fmt.Sprintf("10.200.%d.%d", global/250, global%250+1))
	p.Name = fmt.Sprintf("%s-r%d-%04d", deployService, rev, n)
	p.Labels = map[string]string{"app": deployService}
	p.Spec.NodeName = nodeName(global)
	return workloadPod(p, fmt.Sprintf("%s-r%d", deployService, rev))
}

// deployRevision creates the Deployment's Service and its first revision's Pods, waits for its
// slices and returns the Pods.
func deployRevision(ctx context.Context, b *testing.B, client kubernetes.Interface, slices *benchkit.Observer[*discovery.EndpointSlice], proc *benchkit.Process) []*corev1.Pod {
	b.Helper()
	svc := makeService(deployNS, 0)
	svc.Name = deployService
	svc.Spec.Selector = map[string]string{"app": deployService}
	if _, err := client.CoreV1().Services(deployNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating the Deployment's Service: %v", err)
	}
	done := slices.WhenAll(deployComplete(1))
	pods := make([]*corev1.Pod, deployReplicas)
	err := benchkit.Parallel(ctx, deployReplicas, benchkit.CreateWorkers, func(ctx context.Context, n int) error {
		p, err := createPod(ctx, client, deployPod(1, n))
		pods[n] = p
		return err
	})
	if err != nil {
		b.Fatalf("creating the Deployment's Pods: %v", err)
	}
	proc.Await(done, rolloutTimeout, "the Deployment's first EndpointSlices")
	time.Sleep(benchkit.QuietSettle)
	return pods
}

// rollingUpdate replaces old (revision 1) with deployReplicas Pods of revision 2 the way the
// Deployment and ReplicaSet controllers and the kubelets would, maxSurge and maxUnavailable
// 25%: each step creates new Pods up to replicas + maxSurge in all (each created, then
// reported Running and Ready) and deletes old Pods down to replicas - maxUnavailable
// available; the deleted Pods terminate (deletionTimestamp set) and, once the step's new Pods
// are Ready, are removed as their kubelets would. Four steps of 250 up and 250 down.
func rollingUpdate(ctx context.Context, b *testing.B, client kubernetes.Interface, old []*corev1.Pod, logf func(string, ...any)) {
	b.Helper()
	created := 0
	for step := 1; len(old) > 0 || created < deployReplicas; step++ {
		up := min(deployReplicas-created, deployReplicas+maxSurge-len(old)-created)
		// Every Pod is Ready when a step starts: the previous step waited for them.
		down := min(len(old), len(old)+created-(deployReplicas-maxUnavailable))
		if up <= 0 && down <= 0 {
			b.Fatalf("rolling update stuck at %d old and %d new Pods", len(old), created)
		}
		first, gone := created, old[:max(0, down)]
		err := benchkit.Parallel(ctx, max(0, up)+len(gone), benchkit.CreateWorkers, func(ctx context.Context, n int) error {
			if n < up {
				_, err := createPod(ctx, client, deployPod(2, first+n))
				return err
			}
			return client.CoreV1().Pods(deployNS).Delete(ctx, gone[n-up].Name, metav1.DeleteOptions{})
		})
		if err != nil {
			b.Fatalf("rolling update step %d: %v", step, err)
		}
		zero := int64(0)
		err = benchkit.Parallel(ctx, len(gone), benchkit.CreateWorkers, func(ctx context.Context, n int) error {
			return client.CoreV1().Pods(deployNS).Delete(ctx, gone[n].Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
		if err != nil {
			b.Fatalf("rolling update step %d, removing terminated Pods: %v", step, err)
		}
		old, created = old[len(gone):], created+max(0, up)
		logf("rolling update step %d: %d old, %d new Pods", step, len(old), created)
	}
}

// deployComplete holds once the Deployment's Service's slices list exactly the deployReplicas
// Pods of revision rev, all ready.
func deployComplete(rev int) func(map[string]*discovery.EndpointSlice) bool {
	want := make(map[string]bool, deployReplicas)
	for n := range deployReplicas {
		want[deployPod(rev, n).Status.PodIP] = true
	}
	return func(objs map[string]*discovery.EndpointSlice) bool {
		seen := 0
		for _, sl := range objs {
			if sl.Namespace != deployNS || sl.Labels[discovery.LabelServiceName] != deployService {
				continue
			}
			for _, ep := range sl.Endpoints {
				if len(ep.Addresses) == 0 || !want[ep.Addresses[0]] || !endpointReady(ep) {
					return false
				}
				seen++
			}
		}
		return seen == deployReplicas
	}
}

// ---- fixtures ----

// workloadPod dresses p (from makePod) as a Pod of a typical Deployment's ReplicaSet rs looks
// once stored and reported by its kubelet: owner, template hash, a few annotations, a
// container with arguments, environment, resources, probes and mounts, and the kubelet's full
// status (five conditions, host IP, start time, container status). The apiserver adds its
// defaults. Both sides cache Pods: what they keep of these bytes is part of what is compared.
func workloadPod(p *corev1.Pod, rs string) *corev1.Pod {
	started := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p.Labels["pod-template-hash"] = rs[len(rs)-6:]
	p.Annotations = map[string]string{
		"kubectl.kubernetes.io/restartedAt": started.Format(time.RFC3339),
		"prometheus.io/scrape":              "true",
		"prometheus.io/port":                "8080",
	}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs,
		UID: "00000000-0000-0000-0000-00000000beef", Controller: new(true), BlockOwnerDeletion: new(true)}}
	c := &p.Spec.Containers[0]
	c.Image = "registry.example.com/team/app:1.24.3"
	c.Args = []string{"--listen=:8080", "--log-level=info", "--config=/etc/app/config.yaml"}
	c.Env = []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
		{Name: "GOMAXPROCS", Value: "2"},
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://otel-collector.observability.svc:4317"},
		{Name: "DATABASE_URL", Value: "postgres://app@db.data.svc:5432/app?sslmode=require"},
	}
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}}, PeriodSeconds: 10}
	}
	c.ReadinessProbe, c.LivenessProbe = probe("/ready"), probe("/healthz")
	c.VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app", ReadOnly: true}}
	p.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}}

	node, _ := strconv.Atoi(strings.TrimPrefix(p.Spec.NodeName, "node-"))
	hostIP := fmt.Sprintf("192.168.0.%d", node+1)
	p.Status.HostIP, p.Status.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	p.Status.StartTime = &started
	p.Status.QOSClass = corev1.PodQOSBurstable
	p.Status.Conditions = nil
	for _, t := range []corev1.PodConditionType{"PodReadyToStartContainers", corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started})
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: c.Name, Ready: true, Started: new(true), Image: c.Image,
		ImageID:     "registry.example.com/team/app@sha256:4f1c0a3e9d3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f",
		ContainerID: "containerd://" + strings.Repeat("0123456789abcdef", 4),
		State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
	}}
	return p
}

func nodeName(n int) string { return fmt.Sprintf("node-%02d", n%sliceNodes) }

// createNodes creates sliceNodes Ready Nodes in three zones, named as makePod and deployPod
// place their Pods.
func createNodes(ctx context.Context, b *testing.B, client kubernetes.Interface) {
	b.Helper()
	zones := []string{"zone-a", "zone-b", "zone-c"}
	err := benchkit.Parallel(ctx, sliceNodes, benchkit.CreateWorkers, func(ctx context.Context, n int) error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(n), Labels: map[string]string{corev1.LabelTopologyZone: zones[n%len(zones)]}}}
		created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
		}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating Nodes: %v", err)
	}
}

// slicesComplete holds once the slices of Services 0..services-1 in benchNS hold perService
// endpoints each, all ready.
func slicesComplete(services, perService int) func(map[string]*discovery.EndpointSlice) bool {
	return func(objs map[string]*discovery.EndpointSlice) bool {
		ready := make(map[string]int, services)
		for _, sl := range objs {
			if sl.Namespace != benchNS {
				continue
			}
			for _, ep := range sl.Endpoints {
				if !endpointReady(ep) {
					return false
				}
				ready[sl.Labels[discovery.LabelServiceName]]++
			}
		}
		for s := range services {
			if ready[serviceName(s)] != perService {
				return false
			}
		}
		return true
	}
}

func endpointReady(ep discovery.Endpoint) bool {
	return ep.Conditions.Ready != nil && *ep.Conditions.Ready
}

// ---- reporting ----

func (r *sliceResult) perFlip() float64 { return float64(r.flipWrites) / float64(len(r.flips)) }

// overFloor is how much a flip's p-th percentile exceeds the floor's: the controller's own
// reaction time.
func (r *sliceResult) overFloor(p float64) float64 {
	return benchkit.Millis(benchkit.Percentile(r.flips, p)) - benchkit.Millis(benchkit.Percentile(r.cold.Floor, p))
}

func (r *sliceResult) report(b *testing.B) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.cold.Floor, 50)), "floor-p50-ms")
	b.ReportMetric(r.cold.Sync.Seconds(), "cold-sync-s")
	b.ReportMetric(float64(r.cold.Writes), "cold-slice-writes")
	b.ReportMetric(benchkit.MiB(r.cold.IdleRSS), "idle-rss-MiB")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.flips, 50)), "flip-p50-ms")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.flips, 99)), "flip-p99-ms")
	b.ReportMetric(r.perFlip(), "slice-writes/flip")
	b.ReportMetric(float64(r.rolloutWrites), "rollout-slice-writes")
	b.ReportMetric(benchkit.MiB(r.loadedRSS), "loaded-rss-MiB")
}

func printSliceTable(w io.Writer, mine, theirs *sliceResult) {
	if mine == nil && theirs == nil {
		return
	}
	var rows benchkit.Rows[sliceResult]
	rows.AddColdStart(func(r *sliceResult) *benchkit.ColdStart { return &r.cold }, "EndpointSlice", sliceServices)
	rows.AddSeconds("cold sync: start -> first EndpointSlice write (s)", func(r *sliceResult) time.Duration { return r.firstWrite }, "%.2f")
	rows.AddCount("cold sync Endpoints writes (written beforehand; target 0)", func(r *sliceResult) int { return r.coldEndpointsW })
	rows.AddPercentiles("flip latency", func(r *sliceResult) []time.Duration { return r.flips }, "%.1f", 50, 90, 99, 100)
	rows.Add("flip p50 over floor p50 (ms)", func(r *sliceResult) float64 { return r.overFloor(50) }, "%.1f")
	rows.Add("flip p99 over floor p99 (ms)", func(r *sliceResult) float64 { return r.overFloor(99) }, "%.1f")
	rows.Add("EndpointSlice writes per flip (target 1.00)", (*sliceResult).perFlip, "%.2f")
	rows.AddSeconds("flips CPU (s)", func(r *sliceResult) time.Duration { return r.flipCPU }, "%.2f")
	rows.AddSeconds("rolling update driven, context (s)", func(r *sliceResult) time.Duration { return r.rolloutDriven }, "%.1f")
	rows.AddSeconds("rolling update -> slices complete (s)", func(r *sliceResult) time.Duration { return r.rollout }, "%.1f")
	rows.AddCount("rolling update EndpointSlice writes", func(r *sliceResult) int { return r.rolloutWrites })
	rows.AddSeconds("rolling update CPU (s)", func(r *sliceResult) time.Duration { return r.rolloutCPU }, "%.2f")
	rows.AddMiB("loaded RSS, max during flips + rollout (MiB)", func(r *sliceResult) int64 { return r.loadedRSS })
	rows.AddMiB("peak RSS, VmHWM (MiB)", func(r *sliceResult) int64 { return r.peakRSS })
	fmt.Fprintf(w, "\nEndpointSlice benchmark: %d Services x %d Pods on %d Nodes, %d readiness flips, a %d-Pod rolling update (25%% surge / unavailable); both sides %d QPS / %d burst, %s\n\n",
		sliceServices, slicePodsPerService, sliceNodes, sliceFlips, deployReplicas, sliceQPS, sliceBurst, "--concurrent-service-endpoint-syncs=5 --max-endpoints-per-slice=100 --endpointslice-updates-batch-period=0s")
	benchkit.Compare(slicesOurs.Name, slicesUpstream.Name, mine, theirs, rows).Write(w)
	fmt.Fprintf(w, "\nLower is better everywhere; README.md defines each row. %d slices at %d QPS after a burst of %d take at least %.1fs of client-side throttling.\n\n",
		sliceServices, sliceQPS, sliceBurst, max(0, float64(sliceServices-sliceBurst)/sliceQPS))
}
