package scale

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/benchkit"
	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Sharded runs (issue 35 item 5): endpoints-controller and quota-controller as N static shards
// (--shards=N --shard-index=I, each one replica, leader election on), N from SCALE_SHARDS, with
// each hash of SCALE_SHARD_HASH (--shard-hash; fnv, mixed or both, comma-separated; N=1 runs
// once, as one shard owns everything whatever its hash), on an apiserver with the
// ShardedListAndWatch gate on or off (SCALE_GATE), against the same fixtures as TestScale
// (their namespaces named as clusters name them, appNames) plus a hot namespace.
// SCALE_CAPACITY=off skips endpoints' capacity ramp and takeover. Figures are printed, never
// asserted.

// hotPodsTotal is the hot namespace's Pod count: 3,000 Pods in one namespace, so one shard
// holds a namespace far larger than the others.
const hotPodsTotal = 3000

// Capacity ramp: flips/s per step, each step lasting rampStep; a step whose p99 passes
// rampLimit ends the ramp. A reaction not seen within rampWait counts as rampWait.
var rampRates = []float64{15, 30, 45, 60, 90, 120, 180, 240}

// pacedRates are the paced churn's steps at one replica's total budget (the main phase's
// QPS/N per shard): the flips go out at the asked rate whatever the layout, with up to
// rampInFlight in flight, so every layout of a run is compared at the same offered load (the
// main churn sends one flip at a time, and its sent rate falls on a busy machine).
var pacedRates = []float64{10, 20, 30}

const (
	rampStep     = 6 * time.Second
	rampLimit    = 2 * time.Second
	rampWait     = 30 * time.Second
	rampInFlight = 64
	takeoverWait = 90 * time.Second
	layoutBudget = 10 * time.Minute
)

// defaultBudget is each binary's default --kube-api-qps / --kube-api-burst (services/endpoints'
// options.go; quota has the shared default).
var defaultBudget = map[string][2]int{"endpoints": {60, 90}, "quota": {20, 30}}

// layoutResult is what one layout (N shards of one binary) measured.
type layoutResult struct {
	Controller string `json:"controller"`
	Shards     int    `json:"shards"`
	Gate       string `json:"gate"`
	// Hash is --shard-hash ("" at N=1: one shard owns every namespace whatever its hash).
	Hash string `json:"hash,omitempty"`
	// Mean client rate-limiter and workqueue waits per shard during the churn (ms): whether a
	// churn tail is the budget or the processing.
	RateLimiterWaitMs []float64 `json:"churnRateLimiterWaitMs,omitempty"`
	QueueWaitMs       []float64 `json:"churnQueueWaitMs,omitempty"`
	// ChurnDetail is each shard's requests (method code:count), reconciles by result, workqueue
	// delayed adds, and its rate-limiter waits, queue waits and item processings over 1 s
	// during the churn.
	ChurnDetail []string `json:"churnDetail,omitempty"`
	// ChurnHostBusy is the share of the machine's CPU time (all cores) that was not idle during
	// the churn, from /proc/stat: whether a churn tail is the machine rather than the shards.
	ChurnHostBusy float64 `json:"churnHostCPUBusy,omitempty"`
	// QPS / Burst per shard in the main phase: the single replica's default divided by N, so
	// the shards together have one replica's budget.
	QPS   float64 `json:"qpsPerShard"`
	Burst int     `json:"burstPerShard"`
	// Modes is each shard's kcm_split_shard_info mode (resource=mode, ...).
	Modes        []string  `json:"modes"`
	LoadStart    string    `json:"loadavgStart"`
	LoadEnd      string    `json:"loadavgEnd"`
	ColdSeconds  float64   `json:"coldStartExpectedStateSeconds"`
	SettledSecs  float64   `json:"coldStartSettledSeconds"`
	IdleRSSMiB   []float64 `json:"idleRSSMiB"`
	PeakRSSMiB   []float64 `json:"peakRSSMiB"`
	ChurnP50ms   float64   `json:"churnP50ms"`
	ChurnP99ms   float64   `json:"churnP99ms"`
	SliceP99ms   float64   `json:"sliceP99ms,omitempty"`
	ChurnSamples int       `json:"churnSamples"`
	ChurnRate    float64   `json:"churnSentPerSecond,omitempty"`
	// WatchEvents / WatchBytes: apiserver_watch_events_total / _sizes_sum by resource, the
	// apiserver's count of events it sent to every watcher during the churn (the harness's own
	// informers watch Endpoints, EndpointSlices and ResourceQuotas, not Pods).
	WatchEvents map[string]float64 `json:"watchEventsDuringChurn"`
	WatchBytes  map[string]float64 `json:"watchBytesDuringChurn"`
	// PodWrites is the churn's Pod writes (flips; quota: creates and deletes).
	PodWrites int `json:"podWritesDuringChurn"`
	// Paced is the paced churn at one replica's total budget (pacedRates), endpoints only.
	Paced []rampStat `json:"pacedChurn,omitempty"`
	// Capacity phase (endpoints): each shard at the default budget.
	CapQPS      float64    `json:"capacityQPSPerShard,omitempty"`
	Ramp        []rampStat `json:"ramp,omitempty"`
	Capacity    float64    `json:"capacityFlipsPerSecond,omitempty"`
	TakeoverSec float64    `json:"takeoverSeconds,omitempty"`
	TakeoverOf  int        `json:"takeoverShard,omitempty"`
	HotShard    int        `json:"hotShard"`
}

type rampStat struct {
	Asked   float64 `json:"asked"`
	Sent    float64 `json:"sent"`
	Samples int     `json:"samples"`
	P50ms   float64 `json:"p50ms"`
	P99ms   float64 `json:"p99ms"`
}

// shardProc is one running shard process and its metrics URL.
type shardProc struct {
	*benchkit.Process
	url   string
	index int
}

// Over 80 lines: the env read, then one control plane whose fixtures, observers and watch baseline every layout reuses in turn.
func TestShards(t *testing.T) {
	counts := os.Getenv("SCALE_SHARDS")
	if counts == "" {
		t.Skip("run by `make scale-shards SIZE=M SHARDS=1,2,4 GATE=on|off` (SCALE_SHARDS unset)")
	}
	sz, ok := sizes[os.Getenv("SCALE_SIZE")]
	if !ok {
		t.Fatalf("SCALE_SIZE=%q: want XS, S, M or L", os.Getenv("SCALE_SIZE"))
	}
	var ns []int
	for _, f := range strings.Split(counts, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			t.Fatalf("SCALE_SHARDS: %q is not a shard count", f)
		}
		ns = append(ns, n)
	}
	gate := os.Getenv("SCALE_GATE")
	if gate != "on" && gate != "off" {
		t.Fatalf("SCALE_GATE=%q: want on or off", gate)
	}
	var hashes []sharding.Hash
	for _, f := range strings.Split(cmp.Or(os.Getenv("SCALE_SHARD_HASH"), string(sharding.HashMixed)), ",") {
		h, err := sharding.ParseHash(f)
		if err != nil || f == "" {
			t.Fatalf("SCALE_SHARD_HASH: %q is not a hash; want fnv, mixed or both, comma-separated", f)
		}
		hashes = append(hashes, h)
	}
	capacity := os.Getenv("SCALE_CAPACITY") != "off"
	if sz.appNamespaces() > len(appNames) {
		t.Fatalf("size %s has %d application namespaces, the realistic names %d", sz.name, sz.appNamespaces(), len(appNames))
	}
	ctls := strings.Split(cmp.Or(os.Getenv("SCALE_CONTROLLERS"), "endpoints,quota"), ",")
	for _, a := range ctls {
		if _, ok := defaultBudget[a]; !ok {
			t.Fatalf("SCALE_CONTROLLERS: %q is not sharded; want endpoints, quota", a)
		}
	}
	logf := benchkit.Progress("shards " + sz.name + " gate " + gate)
	args := []string{"--max-requests-inflight=800", "--max-mutating-requests-inflight=400", "--audit-log-maxsize=100000"}
	if gate == "on" {
		args = append(args, "--feature-gates=ShardedListAndWatch=true")
	}
	env, err := testenv.Start(testenv.Options{ExtraAPIServerArgs: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &cluster{sz: sz, env: env, client: fastClient(t, env, "fixtures"), logf: logf, hotServices: hotPodsTotal / sz.podsPerService}
	startKwok(t, env)
	start := time.Now()
	c.createFixtures(ctx, t)
	logf("fixtures done in %s (load average %s)", time.Since(start).Round(time.Second), loadavg())
	watch := fastClient(t, env, "watch")
	c.endpoints = benchkit.NewObserver[*corev1.Endpoints](ctx, t, watch, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Endpoints().Informer()
	})
	c.slices = benchkit.NewObserver[*discoveryv1.EndpointSlice](ctx, t, watch, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Discovery().V1().EndpointSlices().Informer()
	})
	c.quotas = benchkit.NewObserver[*corev1.ResourceQuota](ctx, t, watch, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().ResourceQuotas().Informer()
	})
	layouts := shardLayouts(ns, hashes)
	spread := c.spread(layouts)
	fmt.Fprint(os.Stderr, spread)

	c.notReady, c.bins = map[int]bool{}, map[string]string{}
	base := c.watchBaseline(ctx, t)
	logf("Pod watch events per Pod status write with no controller running: %.2f (kwok's watch)", base)
	var results []*layoutResult
	write := func(final bool) {
		out := shardsReport(sz, gate, hashes, spread, base, results, final)
		if final {
			fmt.Println(out)
		}
		dir := os.Getenv("SCALE_OUT")
		if dir == "" {
			return
		}
		base := filepath.Join(dir, fmt.Sprintf("results-%s-shards-gate-%s-hash-%s", sz.name, gate, hashNames(hashes, "-")))
		if err := os.WriteFile(base+".md", []byte(out), 0o644); err != nil {
			t.Error(err)
		}
		raw, _ := json.MarshalIndent(map[string]any{"size": sz.name, "gate": gate, "hashes": hashes, "partial": !final, "layouts": results}, "", " ")
		_ = os.WriteFile(base+".json", raw, 0o644)
	}
	for _, alias := range ctls {
		ctl := controllers[slices.IndexFunc(controllers, func(x controller) bool { return x.alias == alias })]
		for _, l := range layouts {
			// A layout takes up to about 8 minutes at M: skip rather than be cut off by the
			// timeout, which would leave the processes running (no cleanup runs then).
			if deadline, ok := t.Deadline(); ok && time.Until(deadline) < layoutBudget {
				t.Logf("skipping %s at N=%d: under %s left before the test's timeout", alias, l.n, layoutBudget)
				continue
			}
			results = append(results, c.runLayout(ctx, t, ctl, l.n, l.hash, gate, capacity))
			write(false)
		}
	}
	write(true)
}

func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:3], " ")
}

// cpuTimes is the first line of /proc/stat: the machine's CPU time, all cores, in jiffies.
type cpuTimes struct{ idle, total float64 }

func hostCPU() cpuTimes {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	var c cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i == 8 { // guest and guest_nice are already counted in user and nice; steal counts as busy
			break
		}
		c.total += v
		if i == 3 || i == 4 { // idle, iowait
			c.idle += v
		}
	}
	return c
}

// busySince is the share of CPU time since c that was not idle (0 when unreadable).
func (c cpuTimes) busySince() float64 {
	now := hostCPU()
	if dt := now.total - c.total; dt > 0 {
		return 1 - (now.idle-c.idle)/dt
	}
	return 0
}

// createHot fills hotNS: hotServices Services with their ReplicaSets and Pods, and a quota.
func (c *cluster) createHot(ctx context.Context, t *testing.T, step func(string, int, func(context.Context, int) error)) {
	cl := c.client
	benchkit.CreateNamespaces(ctx, t, cl, hotNS)
	step("hot Services", c.hotServices, func(ctx context.Context, i int) error {
		_, err := cl.CoreV1().Services(hotNS).Create(ctx, benchkit.RealisticService(hotNS, hotSvc(i)), metav1.CreateOptions{})
		return err
	})
	uids := make([]types.UID, c.hotServices)
	step("hot ReplicaSets", c.hotServices, func(ctx context.Context, i int) error {
		created, err := cl.AppsV1().ReplicaSets(hotNS).Create(ctx, replicaSet(hotNS, hotSvc(i), int32(c.sz.podsPerService)), metav1.CreateOptions{})
		if err == nil {
			uids[i] = created.UID
		}
		return err
	})
	n := c.hotServices * c.sz.podsPerService
	c.hotPods = make([]podRef, n)
	step("hot Pods", n, func(ctx context.Context, i int) error {
		s := i / c.sz.podsPerService
		// 10.200.0.0/16 and up: apart from the size's Pods (10.64.0.0 and up, L ends in 10.65).
		ref := podRef{ns: hotNS, name: fmt.Sprintf("%s-%d", hotSvc(s), i%c.sz.podsPerService), svc: hotSvc(s), ip: fmt.Sprintf("10.%d.%d.%d", 200+i/65536, (i/256)%256, i%256)}
		c.hotPods[i] = ref
		p := benchkit.RealisticPod(ref.ns, ref.name, ref.svc, fmt.Sprintf("node-%05d", i%c.sz.nodes), ref.ip)
		p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = ref.svc+"-"+p.Labels["pod-template-hash"], uids[s]
		status := p.Status
		created, err := cl.CoreV1().Pods(ref.ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = status
		_, err = cl.CoreV1().Pods(ref.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: hotNS, Name: "compute"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		corev1.ResourcePods: resource.MustParse("10000"), corev1.ResourceServices: resource.MustParse("1000"), corev1.ResourceConfigMaps: resource.MustParse("10000"),
	}}}
	if _, err := cl.CoreV1().ResourceQuotas(hotNS).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func hotSvc(i int) string { return fmt.Sprintf("hot-%04d", i) }

// layout is a shard count and, past one shard, a hash.
type layout struct {
	n    int
	hash sharding.Hash // "" at n=1
}

// shardLayouts are the layouts of a run, in order: each count with each hash, one shard once.
func shardLayouts(counts []int, hashes []sharding.Hash) []layout {
	var out []layout
	for _, n := range counts {
		if n == 1 {
			out = append(out, layout{n: 1})
			continue
		}
		for _, h := range hashes {
			out = append(out, layout{n: n, hash: h})
		}
	}
	return out
}

func (l layout) String() string {
	if l.n == 1 {
		return "1"
	}
	return fmt.Sprintf("%d %s", l.n, l.hash)
}

func hashNames(hs []sharding.Hash, sep string) string {
	var out []string
	for _, h := range hs {
		out = append(out, string(h))
	}
	return strings.Join(out, sep)
}

// spread says, for each layout, how many application namespaces and Pods each shard owns and
// their max/mean over the shards (the Pods' with the hot namespace), and which shard holds
// the hot namespace, with shared/sharding's hash as the binaries use it.
func (c *cluster) spread(layouts []layout) string {
	var b strings.Builder
	b.WriteString("| shards | hash | application namespaces per shard | max/mean | Pods per shard (hot namespace included) | max/mean | hot namespace in shard |\n|---|---|---|---|---|---|---|\n")
	perNS := servicesPerNS * c.sz.podsPerService
	for _, l := range layouts {
		nsc, podc := c.perShard(l, perNS)
		fmt.Fprintf(&b, "| %d | %s | %s | %.2f | %s | %.2f | %d |\n", l.n, cmp.Or(string(l.hash), "-"), joinInts(nsc), maxMean(nsc), joinInts(podc), maxMean(podc), hotShard(l))
	}
	return b.String()
}

// perShard counts the application namespaces and the Pods (hot namespace included) each shard
// of l owns.
func (c *cluster) perShard(l layout, perNS int) (nss, pods []int) {
	nss, pods = make([]int, l.n), make([]int, l.n)
	for j := range c.sz.appNamespaces() {
		k := shardOf(l, appNS(j))
		nss[k]++
		pods[k] += perNS
	}
	pods[shardOf(l, hotNS)] += len(c.hotPods)
	return nss, pods
}

// shardOf is the shard of l owning namespace.
func shardOf(l layout, namespace string) int {
	for i := range l.n {
		if (sharding.Shard{Index: i, Count: l.n, Hash: l.hash}).Owns(namespace) {
			return i
		}
	}
	panic("no shard owns " + namespace)
}

func hotShard(l layout) int { return shardOf(l, hotNS) }

func joinInts(v []int) string {
	var out []string
	for _, x := range v {
		out = append(out, strconv.Itoa(x))
	}
	return strings.Join(out, " / ")
}

// maxMean is the largest of v over their mean (0 for none).
func maxMean(v []int) float64 {
	sum := 0
	for _, x := range v {
		sum += x
	}
	if sum == 0 {
		return 0
	}
	return float64(slices.Max(v)) * float64(len(v)) / float64(sum)
}

// startShards starts the N shard processes of ctl together, each with budget qps/burst.
func (c *cluster) startShards(t *testing.T, bin string, ctl controller, l layout, qps float64, burst int, only int) []*shardProc {
	n := l.n
	var out []*shardProc
	for i := range n {
		if only >= 0 && i != only {
			continue
		}
		// At one shard the binary's default hash: one shard owns everything whatever its hash.
		args, url, err := benchkit.OursArgs(c.env.Kubeconfig, "--leader-elect=true", fmt.Sprintf("--shards=%d", n), fmt.Sprintf("--shard-index=%d", i),
			fmt.Sprintf("--kube-api-qps=%g", qps), fmt.Sprintf("--kube-api-burst=%d", burst))
		if l.hash != "" {
			args = append(args, "--shard-hash="+string(l.hash))
		}
		if err != nil {
			t.Fatal(err)
		}
		p := benchkit.Start(t, fmt.Sprintf("%s[%d-of-%d]", ctl.binary, i, n), bin, args...)
		out = append(out, &shardProc{Process: p, url: url, index: i})
	}
	return out
}

// runLayout runs ctl as n shards: a main phase at one replica's budget split n ways (cold
// start, idle, churn), then for endpoints a capacity phase with each shard at the full default
// budget (ramp, takeover).
// Over 80 lines: one layout's phases (cold start, idle, churn, then endpoints' ramp and takeover) on the same shard processes, filling one result.
func (c *cluster) runLayout(ctx context.Context, t *testing.T, ctl controller, n int, hash sharding.Hash, gate string, capacity bool) *layoutResult {
	id := c.runID.Add(1)
	budget := defaultBudget[ctl.alias]
	l := layout{n: n, hash: hash}
	r := &layoutResult{Controller: ctl.alias, Shards: n, Gate: gate, Hash: string(hash), QPS: float64(budget[0]) / float64(n), Burst: max(1, int(math.Ceil(float64(budget[1])/float64(n)))), LoadStart: loadavg()}
	r.HotShard = hotShard(l)
	logf := benchkit.Progress(fmt.Sprintf("%s x%s", ctl.alias, l))
	bin := c.bins[ctl.alias]
	if bin == "" {
		bin = benchkit.BuildShipped(t, "github.com/kcm-split/kcm-split/services/"+ctl.pkg)
		c.bins[ctl.alias] = bin
	}
	converged := c.prepare(ctx, t, []controller{ctl})
	procs := c.startShards(t, bin, ctl, l, r.QPS, r.Burst, -1)
	at := procs[0].Await(converged, settleTimeoutFor(c.sz), "the cold start's expected state")
	r.ColdSeconds = at.Sub(procs[0].Started).Seconds()
	var settled time.Duration
	for _, p := range procs {
		settled = max(settled, settle(t, p.Process, settleTimeoutFor(c.sz)))
	}
	r.SettledSecs = settled.Seconds()
	logf("QPS %g / burst %d per shard: expected state after %.1fs, settled after %.1fs", r.QPS, r.Burst, r.ColdSeconds, r.SettledSecs)
	time.Sleep(idleWindow)
	for _, p := range procs {
		r.IdleRSSMiB = append(r.IdleRSSMiB, benchkit.MiB(p.Memory().RSS))
		r.Modes = append(r.Modes, shardModes(p.url))
	}
	logf("idle RSS per shard %v MiB; modes %v", r.IdleRSSMiB, r.Modes)

	before := watchMetrics(ctx, t, c)
	waitsBefore := make([]map[string]float64, len(procs))
	for i, p := range procs {
		waitsBefore[i] = shardWaits(p.url)
	}
	cpuBefore := hostCPU()
	lat, also, rate := c.churnOf(ctx, t, ctl.alias, id)
	r.ChurnHostBusy = cpuBefore.busySince()
	after := watchMetrics(ctx, t, c)
	for i, p := range procs {
		w := shardWaits(p.url)
		r.RateLimiterWaitMs = append(r.RateLimiterWaitMs, meanWaitMs(waitsBefore[i], w, "rest_client_rate_limiter_duration_seconds"))
		r.QueueWaitMs = append(r.QueueWaitMs, meanWaitMs(waitsBefore[i], w, "workqueue_queue_duration_seconds"))
		r.ChurnDetail = append(r.ChurnDetail, churnDetail(waitsBefore[i], w))
		logf("churn, shard %d: %s", i, r.ChurnDetail[i])
	}
	logf("churn: mean client rate-limiter wait per shard %v ms, mean workqueue wait per shard %v ms; machine CPU busy %.0f%%", r.RateLimiterWaitMs, r.QueueWaitMs, 100*r.ChurnHostBusy)
	r.WatchEvents, r.WatchBytes = map[string]float64{}, map[string]float64{}
	for k, v := range after {
		res, kind, _ := strings.Cut(k, "|")
		if d := v - before[k]; d > 0 {
			if kind == "events" {
				r.WatchEvents[res] = d
			} else {
				r.WatchBytes[res] = d
			}
		}
	}
	r.ChurnSamples, r.ChurnRate = len(lat), rate
	r.PodWrites = c.sz.flips
	if ctl.alias == "quota" {
		r.PodWrites = 2 * min(c.sz.quotaOps, c.sz.appNamespaces())
	}
	r.ChurnP50ms, r.ChurnP99ms = benchkit.Millis(benchkit.Percentile(lat, 50)), benchkit.Millis(benchkit.Percentile(lat, 99))
	if s := also["slices"]; len(s) > 0 {
		r.SliceP99ms = benchkit.Millis(benchkit.Percentile(s, 99))
	}
	for _, p := range procs {
		r.PeakRSSMiB = append(r.PeakRSSMiB, benchkit.MiB(p.Memory().HWM))
	}
	logf("churn: %d samples, p50 %.0f p99 %.0f ms (sent %.1f/s); watch events %v; peak RSS %v MiB", len(lat), r.ChurnP50ms, r.ChurnP99ms, rate, r.WatchEvents, r.PeakRSSMiB)

	if ctl.alias == "endpoints" {
		r.Paced, _ = c.ramp(ctx, t, pacedRates, func(f string, a ...any) { logf("paced churn: "+f, a...) })
	}
	if ctl.alias == "endpoints" && capacity {
		r.CapQPS = float64(budget[0])
		if n > 1 {
			for _, p := range procs {
				p.Shutdown()
			}
			procs = c.startShards(t, bin, ctl, l, float64(budget[0]), budget[1], -1)
			for _, p := range procs {
				p.WaitUntil(settleTimeoutFor(c.sz), "ready (leading, caches synced)", func() bool { code, _ := benchkit.Get(p.url + "/readyz"); return code == 200 })
			}
			for _, p := range procs {
				settle(t, p.Process, settleTimeoutFor(c.sz))
			}
		}
		r.Ramp, r.Capacity = c.ramp(ctx, t, rampRates, logf)
		r.TakeoverOf = r.HotShard
		r.TakeoverSec = c.takeover(ctx, t, bin, ctl, l, budget, procs[r.HotShard], logf)
	}
	for _, p := range procs {
		if !p.Exited() {
			p.Shutdown()
		}
	}
	r.LoadEnd = loadavg()
	return r
}

// shardModes reads kcm_split_shard_info from a shard's metrics: "resource=mode" for each
// series at 1.
func shardModes(url string) string {
	_, body := benchkit.Get(url + "/metrics")
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "kcm_split_shard_info{") || !strings.HasSuffix(line, " 1") {
			continue
		}
		out = append(out, label(line, "resource")+"="+label(line, "mode"))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func label(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// sampleValue is the value of one sample line of the Prometheus text format (no timestamp).
func sampleValue(line string) (float64, bool) {
	v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
	return v, err == nil
}

// churnHistograms are the shard histograms read around the churn: the client rate limiter's
// wait, the workqueues' wait and their processing time.
var churnHistograms = []string{"rest_client_rate_limiter_duration_seconds", "workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"}

// shardWaits reads a shard's metrics for the churn's diagnosis: of each churnHistograms,
// "<name>_sum", "<name>_count" and "<name>_le1" (observations up to 1 s), summed over their
// labels, and "<name>_le1|<queue>" / "<name>_count|<queue>" per workqueue; "delayed adds"
// (workqueue_retries_total: client-go counts every AddAfter, a batching delay's too, and
// every rate-limited retry), "reconciles|<result>" (success, error, requeue, dropped) and
// "requests|<method>|<code>" (every client request the process sent, its Lease's included).
func shardWaits(url string) map[string]float64 {
	_, body := benchkit.Get(url + "/metrics")
	return parseShardWaits(body)
}

// parseShardWaits is shardWaits on a metrics page in the Prometheus text format.
func parseShardWaits(body string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		v, ok := sampleValue(line)
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch {
		case strings.HasPrefix(line, "workqueue_retries_total{"):
			out["delayed adds"] += v
			continue
		case strings.HasPrefix(line, "kcm_split_reconcile_total{"):
			out["reconciles|"+label(line, "result")] += v
			continue
		case strings.HasPrefix(line, "process_cpu_seconds_total "):
			out["cpu seconds"] = v
			continue
		case strings.HasPrefix(line, "rest_client_requests_total{"):
			out["requests|"+label(line, "method")+"|"+label(line, "code")] += v
			continue
		}
		for _, name := range churnHistograms {
			var key string
			switch {
			case strings.HasPrefix(line, name+"_sum"):
				key = name + "_sum"
			case strings.HasPrefix(line, name+"_count"):
				key = name + "_count"
			case strings.HasPrefix(line, name+"_bucket{") && strings.Contains(line, `le="1"`):
				key = name + "_le1"
			default:
				continue
			}
			out[key] += v
			if q := label(line, "name"); q != "" && !strings.HasSuffix(key, "_sum") {
				out[key+"|"+q] += v
			}
		}
	}
	return out
}

// meanWaitMs is the mean wait in ms of the observations of histogram name between two reads
// of shardWaits (0 when none).
func meanWaitMs(before, after map[string]float64, name string) float64 {
	n := after[name+"_count"] - before[name+"_count"]
	if n <= 0 {
		return 0
	}
	return 1000 * (after[name+"_sum"] - before[name+"_sum"]) / n
}

// churnDetail summarises one shard's change between two reads of shardWaits: its requests
// by method and code, its reconciles by result, its workqueues' delayed adds, its CPU time, and how many
// rate-limiter waits, queue waits and item processings took longer than 1 s, of how many
// (per workqueue too: "queue:over/all").
func churnDetail(before, after map[string]float64) string {
	d := func(k string) float64 { return after[k] - before[k] }
	var parts []string
	var reqs, recs []string
	for k := range after {
		if mc, ok := strings.CutPrefix(k, "requests|"); ok {
			if n := d(k); n > 0 {
				method, code, _ := strings.Cut(mc, "|")
				reqs = append(reqs, fmt.Sprintf("%s %s:%.0f", method, code, n))
			}
		}
		if r, ok := strings.CutPrefix(k, "reconciles|"); ok {
			if n := d(k); n > 0 {
				recs = append(recs, fmt.Sprintf("%s:%.0f", r, n))
			}
		}
	}
	slices.Sort(reqs)
	slices.Sort(recs)
	parts = append(parts, "requests "+strings.Join(reqs, " "), "reconciles "+strings.Join(recs, " "), fmt.Sprintf("delayed adds %.0f", d("delayed adds")), fmt.Sprintf("cpu %.1f s", d("cpu seconds")))
	for _, name := range churnHistograms {
		short := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(name, "rest_client_"), "workqueue_"), "_duration_seconds")
		parts = append(parts, fmt.Sprintf("%s>1s %.0f/%.0f", short, d(name+"_count")-d(name+"_le1"), d(name+"_count")))
		var qs []string
		for k := range after {
			if q, ok := strings.CutPrefix(k, name+"_count|"); ok {
				if all := d(k); all > 0 {
					qs = append(qs, fmt.Sprintf("%s:%.0f/%.0f", q, all-d(name+"_le1|"+q), all))
				}
			}
		}
		if len(qs) > 0 {
			slices.Sort(qs)
			parts[len(parts)-1] += " (" + strings.Join(qs, " ") + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// watchMetrics reads the apiserver's apiserver_watch_events_total and
// apiserver_watch_events_sizes_sum, summed by resource: "pods|events", "pods|bytes".
func watchMetrics(ctx context.Context, t *testing.T, c *cluster) map[string]float64 {
	raw, err := c.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Errorf("reading the apiserver's metrics: %v", err)
		return nil
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		var kind string
		switch {
		case strings.HasPrefix(line, "apiserver_watch_events_total{"):
			kind = "events"
		case strings.HasPrefix(line, "apiserver_watch_events_sizes_sum{"):
			kind = "bytes"
		default:
			continue
		}
		if v, ok := sampleValue(line); ok {
			out[label(line, "resource")+"|"+kind] += v
		}
	}
	return out
}

// nextFlip returns the next Pod for the ramp and takeover, walking the size's Pods by a
// prime stride so that consecutive flips land in different Services and namespaces; a Pod
// comes round again only after every other (at XS within a run: each ramp step waits for its
// flips, so none waits behind an earlier flip of the same Pod).
func (c *cluster) nextFlip(owns func(string) bool) podRef {
	for {
		i := (c.flipNext * 7919) % len(c.pods)
		c.flipNext++
		if ref := c.pods[i]; owns(ref.ns) {
			return ref
		}
	}
}

// flip sets ref's readiness to the opposite of what the harness last set (ready at the
// start) and returns a channel that delivers when its Endpoints show it.
func (c *cluster) flip(ctx context.Context, ref podRef) (<-chan time.Time, time.Time, error) {
	c.mu.Lock()
	// ready is the state to set: the opposite of the current one (ready unless flipped).
	ready := c.notReady[c.podIndex(ref)]
	c.notReady[c.podIndex(ref)] = !ready
	c.mu.Unlock()
	seen := c.endpoints.When(ref.ns+"/"+ref.svc, func(ep *corev1.Endpoints) bool { return slices.Contains(ips(ep, ready), ref.ip) })
	status := "False"
	if ready {
		status = "True"
	}
	now := time.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q,"lastTransitionTime":%q},{"type":"ContainersReady","status":%q,"lastTransitionTime":%q}]}}`, status, now, status, now)
	_, err := c.client.CoreV1().Pods(ref.ns).Patch(ctx, ref.name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	return seen, time.Now(), err
}

func (c *cluster) podIndex(ref podRef) int {
	// Pod IPs are unique per run: the map is keyed by them.
	var a, b, x, y int
	_, _ = fmt.Sscanf(ref.ip, "%d.%d.%d.%d", &a, &b, &x, &y)
	return b<<16 | x<<8 | y
}

// ramp raises the flip rate through rates step by step until p99 passes rampLimit and returns
// each step and the capacity: the highest rate sent whose p99 stayed within the limit.
func (c *cluster) ramp(ctx context.Context, t *testing.T, rates []float64, logf func(string, ...any)) ([]rampStat, float64) {
	var out []rampStat
	var capacity float64
	for _, rate := range rates {
		k := int(rate * rampStep.Seconds())
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		sem := make(chan struct{}, rampInFlight)
		tk := time.NewTicker(time.Duration(float64(time.Second) / rate))
		from := time.Now()
		var failed error
		for range k {
			<-tk.C
			ref := c.nextFlip(func(string) bool { return true })
			sem <- struct{}{}
			wg.Go(func() {
				seen, at, err := c.flip(ctx, ref)
				<-sem
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				d := rampWait
				select {
				case s := <-seen:
					d = max(0, s.Sub(at))
				case <-time.After(rampWait):
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			})
		}
		tk.Stop()
		sent := float64(k) / time.Since(from).Seconds()
		wg.Wait()
		if failed != nil {
			t.Errorf("ramp at %g flips/s: %v", rate, failed)
			break
		}
		st := rampStat{Asked: rate, Sent: sent, Samples: len(lat), P50ms: benchkit.Millis(benchkit.Percentile(lat, 50)), P99ms: benchkit.Millis(benchkit.Percentile(lat, 99))}
		out = append(out, st)
		logf("ramp: asked %g flips/s, sent %.1f/s, p50 %.0f p99 %.0f ms", rate, sent, st.P50ms, st.P99ms)
		if benchkit.Percentile(lat, 99) > rampLimit {
			break
		}
		capacity = sent
		time.Sleep(2 * time.Second)
	}
	return out, capacity
}

// takeover starts a hot standby of shard `of`, waits until it is Ready, SIGKILLs the shard's
// leader and at once flips a Pod of the shard's range: the time from the kill to the flip in
// the Endpoints is the takeover.
func (c *cluster) takeover(ctx context.Context, t *testing.T, bin string, ctl controller, l layout, budget [2]int, leader *shardProc, logf func(string, ...any)) float64 {
	standby := c.startShards(t, bin, ctl, l, float64(budget[0]), budget[1], leader.index)[0]
	standby.WaitUntil(time.Minute, "ready (standby)", func() bool { code, _ := benchkit.Get(standby.url + "/readyz"); return code == 200 })
	time.Sleep(5 * time.Second) // its informers listed (a standby syncs too, if it does)
	ref := c.nextFlip(func(ns string) bool { return shardOf(l, ns) == leader.index })
	killed := time.Now()
	leader.Kill()
	seen, _, err := c.flip(ctx, ref)
	if err != nil {
		t.Errorf("takeover flip: %v", err)
		return 0
	}
	var d time.Duration
	select {
	case at := <-seen:
		d = at.Sub(killed)
	case <-time.After(takeoverWait):
		d = takeoverWait
	}
	logf("takeover of shard %d (SIGKILL -> flip in %s served): %.1fs", leader.index, ref.ns, d.Seconds())
	standby.Shutdown()
	return d.Seconds()
}

// shardsReport writes the run's tables: per layout, per-shard idle and peak RSS (max, mean,
// sum) with their ratios to N=1, cold start, churn, watch events, capacity and takeover.
// Over 80 lines: four markdown tables in the order of the report, each a header and a row per layout.
func shardsReport(sz size, gate string, hashes []sharding.Hash, spread string, perWrite float64, rs []*layoutResult, final bool) string {
	var b strings.Builder
	if !final {
		b.WriteString("**Partial**: written after each layout.\n\n")
	}
	fmt.Fprintf(&b, "# Sharded endpoints and quota, size %s, apiserver gate ShardedListAndWatch %s, --shard-hash %s\n\n", sz.name, gate, hashNames(hashes, " and "))
	fmt.Fprintf(&b, "%d Nodes, %d Pods in %d application namespaces (realistic names: `%s`, ...) + %d Pods in %s; %s\n\n", sz.nodes, sz.pods(), sz.appNamespaces(), strings.Join(appNames[:min(4, sz.appNamespaces())], "`, `"), hotPodsTotal, hotNS, time.Now().UTC().Format(time.RFC3339))
	b.WriteString("N=1 runs once: one shard owns every namespace whatever its hash (`--shards=1`, the binary's default hash). With the gate on, `fnv` shards ask the apiserver for their range (mode server); `mixed` shards filter on the client side, gate or not (mode client).\n\nShard spread:\n\n" + spread + "\n")
	one := map[string]*layoutResult{}
	for _, r := range rs {
		if r.Shards == 1 {
			one[r.Controller] = r
		}
	}
	ratio := func(v float64, base *layoutResult, get func(*layoutResult) float64) string {
		if base == nil || get(base) == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2fx", v/get(base))
	}
	fmt.Fprintf(&b, "| binary | N | hash | QPS/burst per shard | shard modes | load avg start / end | cold start -> expected state (s) | settled (s) | idle RSS per shard max / mean (MiB) | x N=1 (max) | idle sum (MiB) | x N=1 | peak RSS per shard max / mean (MiB) | x N=1 (max) | peak sum | x N=1 | hot shard: idle RSS / mean of the others |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		base := one[r.Controller]
		imax, imean, isum := stats(r.IdleRSSMiB)
		pmax, pmean, psum := stats(r.PeakRSSMiB)
		hot := "n/a"
		if r.Shards > 1 && r.HotShard < len(r.IdleRSSMiB) {
			var others []float64
			for i, v := range r.IdleRSSMiB {
				if i != r.HotShard {
					others = append(others, v)
				}
			}
			_, om, _ := stats(others)
			hot = fmt.Sprintf("%.1f / %.1f (%.2fx)", r.IdleRSSMiB[r.HotShard], om, r.IdleRSSMiB[r.HotShard]/om)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %g / %d | %s | %s / %s | %.1f | %.1f | %.1f / %.1f | %s | %.1f | %s | %.1f / %.1f | %s | %.1f | %s | %s |\n",
			r.Controller, r.Shards, cmp.Or(r.Hash, "-"), r.QPS, r.Burst, strings.Join(r.Modes, "; "), r.LoadStart, r.LoadEnd, r.ColdSeconds, r.SettledSecs,
			imax, imean, ratio(imax, base, func(x *layoutResult) float64 { m, _, _ := stats(x.IdleRSSMiB); return m }), isum, ratio(isum, base, func(x *layoutResult) float64 { _, _, s := stats(x.IdleRSSMiB); return s }),
			pmax, pmean, ratio(pmax, base, func(x *layoutResult) float64 { m, _, _ := stats(x.PeakRSSMiB); return m }), psum, ratio(psum, base, func(x *layoutResult) float64 { _, _, s := stats(x.PeakRSSMiB); return s }), hot)
	}
	fmt.Fprintf(&b, "\nChurn (the shards together get one replica's budget: QPS per shard = default / N) and the apiserver's watch events sent during it (`apiserver_watch_events_total` / `apiserver_watch_events_sizes_sum`, read before and after; the harness's informers watch Endpoints, EndpointSlices and ResourceQuotas, so the Pods' row is the controllers' and kwok's: with no controller running, each Pod status write made %.2f Pod watch events, kwok's; the column \"controllers'\" takes those off):\n\n", perWrite)
	b.WriteString("| binary | N | hash | total QPS | churn sent (/s) | samples | p50 (ms) | p99 (ms) | p99 x N=1 | EndpointSlices p99 (ms) | Pod watch events | controllers' Pod watch events | x N=1 | Pod watch MiB | other watch events | machine CPU busy |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		one1 := one[r.Controller]
		var other []string
		for k, v := range r.WatchEvents {
			if k == "endpoints" || k == "endpointslices" || k == "resourcequotas" {
				other = append(other, fmt.Sprintf("%s %.0f", k, v))
			}
		}
		slices.Sort(other)
		own := func(x *layoutResult) float64 { return x.WatchEvents["pods"] - perWrite*float64(x.PodWrites) }
		fmt.Fprintf(&b, "| %s | %d | %s | %g | %.1f | %d | %.0f | %.0f | %s | %.0f | %.0f | %.0f | %s | %.1f | %s | %.0f%% |\n", r.Controller, r.Shards, cmp.Or(r.Hash, "-"), r.QPS*float64(r.Shards), r.ChurnRate, r.ChurnSamples, r.ChurnP50ms, r.ChurnP99ms,
			ratio(r.ChurnP99ms, one1, func(x *layoutResult) float64 { return x.ChurnP99ms }), r.SliceP99ms, r.WatchEvents["pods"], own(r), ratio(own(r), one1, own),
			r.WatchBytes["pods"]/(1<<20), strings.Join(other, ", "), 100*r.ChurnHostBusy)
	}
	b.WriteString("\nPaced churn (endpoints; the shards together at one replica's budget, as the churn above): each step 6 s of flips sent at the asked rate by up to 64 requests in flight, so every layout gets the same offered load; p99 ms (x N=1 at the same step):\n\n| N | hash | steps: asked -> sent /s, p99 ms (x N=1) |\n|---|---|---|\n")
	for _, r := range rs {
		if r.Controller != "endpoints" || len(r.Paced) == 0 {
			continue
		}
		var steps []string
		for i, st := range r.Paced {
			rel := "n/a"
			if base := one[r.Controller]; base != nil && i < len(base.Paced) && base.Paced[i].P99ms > 0 {
				rel = fmt.Sprintf("%.2fx", st.P99ms/base.Paced[i].P99ms)
			}
			steps = append(steps, fmt.Sprintf("%g -> %.1f, %.0f (%s)", st.Asked, st.Sent, st.P99ms, rel))
		}
		fmt.Fprintf(&b, "| %d | %s | %s |\n", r.Shards, cmp.Or(r.Hash, "-"), strings.Join(steps, "; "))
	}
	if !slices.ContainsFunc(rs, func(r *layoutResult) bool { return len(r.Ramp) > 0 }) {
		b.WriteString("\nCapacity and takeover (endpoints): not measured in this run (`CAPACITY=off`, or no endpoints layout).\n")
		return b.String()
	}
	b.WriteString("\nCapacity (endpoints; each shard at the default budget): flips/s until p99 > 2 s, each step 6 s of flips of distinct Pods sent by up to 64 requests in flight; and takeover (a hot standby of the hot namespace's shard, its leader SIGKILLed, a flip in its range sent at once):\n\n")
	b.WriteString("| N | hash | QPS per shard | steps: asked -> sent /s, p99 ms | capacity (flips/s) | x N x N=1 | takeover (s) |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		if r.Controller != "endpoints" || len(r.Ramp) == 0 {
			continue
		}
		var steps []string
		for _, s := range r.Ramp {
			steps = append(steps, fmt.Sprintf("%g -> %.1f, %.0f", s.Asked, s.Sent, s.P99ms))
		}
		base := one[r.Controller]
		rel := "n/a"
		if base != nil && base.Capacity > 0 {
			rel = fmt.Sprintf("%.2fx", r.Capacity/(float64(r.Shards)*base.Capacity))
		}
		fmt.Fprintf(&b, "| %d | %s | %g | %s | %.1f | %s | %.1f (shard %d) |\n", r.Shards, cmp.Or(r.Hash, "-"), r.CapQPS, strings.Join(steps, "; "), r.Capacity, rel, r.TakeoverSec, r.TakeoverOf)
	}
	return b.String()
}

func stats(v []float64) (mx, mean, sum float64) {
	for _, x := range v {
		mx = max(mx, x)
		sum += x
	}
	if len(v) > 0 {
		mean = sum / float64(len(v))
	}
	return
}

// watchBaseline writes the status of 50 Pods (a new lastTransitionTime on the Ready condition,
// which stays True) with no controller running and returns the Pod watch events the apiserver
// sent per write: what other watchers (kwok) add to every churn's count.
func (c *cluster) watchBaseline(ctx context.Context, t *testing.T) float64 {
	const n = 50
	before := watchMetrics(ctx, t, c)
	for i := range n {
		ref := c.pods[(i*7907)%len(c.pods)]
		now := time.Now().UTC().Format(time.RFC3339Nano)
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":%q}]}}`, now)
		if _, err := c.client.CoreV1().Pods(ref.ns).Patch(ctx, ref.name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("baseline write: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	after := watchMetrics(ctx, t, c)
	return (after["pods|events"] - before["pods|events"]) / n
}
