package bench

// BenchmarkNodeIPAM: node Pod range allocation against upstream kube-controller-manager's
// node-ipam-controller (range allocator), on the same scenario and a fresh control plane
// each. README.md explains each number.

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/benchkit"
)

const (
	// ipamNodes fill the cluster CIDR exactly: a /16 cut into /24s.
	ipamNodes = 256
	// ipamExtra Nodes join the full cluster and wait for a range.
	ipamExtra = 3
	// ipamWait is how long they wait before the first range is freed: long enough for an
	// exponential retry backoff to have grown.
	ipamWait = 30 * time.Second
	// ipamFreeSpacing separates the deletes that free ranges one by one.
	ipamFreeSpacing = 2 * time.Second
	ipamTimeout     = 3 * time.Minute
	// ipamServeCap bounds the wait for a waiting Node after a release; a Node not served by
	// then counts as served at the cap, and the remaining releases are skipped.
	ipamServeCap = 2 * time.Minute
)

var (
	// Both sides run the node lifecycle controllers as well (ours always does); the grace
	// periods are long so that the bare Nodes here (no kubelet) are never marked Unknown.
	ipamFlags = []string{"--allocate-node-cidrs", "--cluster-cidr=10.128.0.0/16", "--node-cidr-mask-size=24",
		"--node-monitor-grace-period=10m", "--node-startup-grace-period=10m"}
	oursIPAM     = benchkit.Ours("nodelifecycle-controller", "github.com/kcm-split/kcm-split/services/nodelifecycle/cmd/nodelifecycle-controller", ipamFlags...)
	upstreamIPAM = benchkit.UpstreamSide("node-ipam-controller,node-lifecycle-controller,taint-eviction-controller", ipamFlags...)
)

func BenchmarkNodeIPAM(b *testing.B) {
	r := benchkit.RunSides(b, []benchkit.Side{oursIPAM, upstreamIPAM}, benchkit.Side.Label, runIPAM, (*ipamResult).report)
	printIPAMTable(os.Stdout, r[0], r[1])
}

type ipamResult struct {
	registered []time.Duration // per Node of the burst: created -> seen with a range
	burst      time.Duration   // first create -> last range seen
	waited     []time.Duration // per freed range: delete answered -> a waiting Node seen with it
	unserved   int             // freed ranges no waiting Node got within ipamServeCap
	overlaps   int             // pairs of Nodes with overlapping ranges at the end
	rss        int64           // VmRSS at the end
}

func runIPAM(b *testing.B, c benchkit.Side) *ipamResult {
	bin, env, logf := c.Begin(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := benchkit.Client(b, env.Config, "kcm-split-bench/kubelets")
	obs := newRangeObserver(ctx, b, benchkit.Client(b, env.Config, "kcm-split-bench/watch"))
	r := &ipamResult{}

	// 1. The controller, up once a first Node has its range.
	proc := c.Start(b, bin, env.Kubeconfig)
	create := func(name string) {
		if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			b.Fatalf("creating %s: %v", name, err)
		}
	}
	obs.created(ipamNodeName(0))
	create(ipamNodeName(0))
	proc.WaitUntil(ipamTimeout, "a range on the first Node", func() bool { return obs.ranged() == 1 })

	// 2. The burst: the other Nodes register at once.
	start := time.Now()
	err := benchkit.Parallel(ctx, ipamNodes-1, benchkit.CreateWorkers, func(ctx context.Context, i int) error {
		name := ipamNodeName(i + 1)
		obs.created(name)
		_, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	proc.WaitUntil(ipamTimeout, "a range on every Node", func() bool { return obs.ranged() == ipamNodes })
	r.burst = obs.lastRange().Sub(start)
	for i := 1; i < ipamNodes; i++ {
		r.registered = append(r.registered, obs.latency(ipamNodeName(i)))
	}
	logf("%d Nodes ranged in %s, p99 %s", ipamNodes, r.burst.Round(time.Millisecond), benchkit.MS(benchkit.Percentile(r.registered, 99)))

	// 3. The cluster is full: more Nodes wait, then ranges are freed one at a time.
	for i := range ipamExtra {
		name := fmt.Sprintf("extra-%d", i)
		obs.created(name)
		create(name)
	}
	time.Sleep(ipamWait)
	if n := obs.ranged(); n != ipamNodes {
		b.Fatalf("%d Nodes have ranges in a space of %d", n, ipamNodes)
	}
	for i := range ipamExtra {
		before := obs.ranged()
		if err := client.CoreV1().Nodes().Delete(ctx, ipamNodeName(i), metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		deleted := time.Now()
		for obs.ranged() == before && time.Since(deleted) < ipamServeCap && !proc.Exited() {
			time.Sleep(10 * time.Millisecond)
		}
		if obs.ranged() == before {
			r.waited = append(r.waited, ipamServeCap)
			r.unserved++
			logf("no waiting Node got the freed range within %s", ipamServeCap)
			break
		}
		r.waited = append(r.waited, obs.lastRange().Sub(deleted))
		time.Sleep(ipamFreeSpacing)
	}
	logf("freed range to waiting Node p50 %s", benchkit.MS(benchkit.Percentile(r.waited, 50)))
	r.overlaps = obs.overlaps()
	r.rss = proc.Memory().RSS
	if r.overlaps > 0 {
		b.Errorf("%s left %d pairs of Nodes with overlapping ranges", c.Name, r.overlaps)
	}
	proc.Shutdown()
	return r
}

func ipamNodeName(i int) string { return fmt.Sprintf("ipam-%03d", i) }

// rangeObserver watches Nodes: when each was created and first seen with a range.
type rangeObserver struct {
	mu       sync.Mutex
	createAt map[string]time.Time
	rangeAt  map[string]time.Time
	ranges   map[string][]string // of the Nodes that exist
	acquired int                 // Nodes ever seen getting a range
	last     time.Time
}

func newRangeObserver(ctx context.Context, b *testing.B, client kubernetes.Interface) *rangeObserver {
	b.Helper()
	o := &rangeObserver{createAt: map[string]time.Time{}, rangeAt: map[string]time.Time{}, ranges: map[string][]string{}}
	benchkit.Inform(ctx, b, client, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Nodes().Informer()
	}, func(obj any, deleted bool) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		at := time.Now()
		o.mu.Lock()
		defer o.mu.Unlock()
		if deleted {
			delete(o.ranges, n.Name)
			return
		}
		if len(n.Spec.PodCIDRs) > 0 && o.ranges[n.Name] == nil {
			o.ranges[n.Name] = n.Spec.PodCIDRs
			o.rangeAt[n.Name] = at
			o.acquired++
			o.last = at
		}
	})
	return o
}

func (o *rangeObserver) created(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.createAt[name] = time.Now()
}

// ranged is how many Nodes were ever seen getting a range.
func (o *rangeObserver) ranged() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acquired
}

func (o *rangeObserver) lastRange() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

func (o *rangeObserver) latency(name string) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rangeAt[name].Sub(o.createAt[name])
}

func (o *rangeObserver) overlaps() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	var all []netip.Prefix
	for _, rs := range o.ranges {
		for _, s := range rs {
			if p, err := netip.ParsePrefix(s); err == nil {
				all = append(all, p)
			}
		}
	}
	n := 0
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[i].Overlaps(all[j]) {
				n++
			}
		}
	}
	return n
}

func (r *ipamResult) report(b *testing.B) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.registered, 99)), "register-p99-ms")
	b.ReportMetric(benchkit.Millis(benchkit.Percentile(r.waited, 50)), "freed-to-waiting-p50-ms")
	b.ReportMetric(float64(r.overlaps), "overlaps")
}

func printIPAMTable(w io.Writer, mine, theirs *ipamResult) {
	if mine == nil && theirs == nil {
		return
	}
	var rows benchkit.Rows[ipamResult]
	rows.AddSeconds(fmt.Sprintf("burst: %d Nodes registered at once, all ranged (s)", ipamNodes-1), func(r *ipamResult) time.Duration { return r.burst }, "%.2f")
	rows.AddPercentiles("register -> range", func(r *ipamResult) []time.Duration { return r.registered }, "%.0f", 50, 99)
	rows.AddPercentiles(fmt.Sprintf("freed range -> waiting Node (after %s full)", ipamWait), func(r *ipamResult) []time.Duration { return r.waited }, "%.0f", 50, 100)
	rows.AddCount(fmt.Sprintf("freed ranges not taken within %s", ipamServeCap), func(r *ipamResult) int { return r.unserved })
	rows.AddCount("overlapping ranges (target 0)", func(r *ipamResult) int { return r.overlaps })
	rows.AddMiB("RSS at the end (MiB)", func(r *ipamResult) int64 { return r.rss })
	fmt.Fprintln(w)
	benchkit.Compare(oursIPAM.Name, upstreamIPAM.Name, mine, theirs, rows).Write(w)
}
