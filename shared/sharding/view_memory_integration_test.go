package sharding_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/benchkit"
	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// readsAudited records Pod lists and watches (and nothing else): the requests each fill sent.
const readsAudited = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["list", "watch"]
  resources: [{group: "", resources: ["pods"]}]
- level: None
`

// plainList makes the reflector list then watch, as a shard's informer did before it streamed
// (the cost this test compares against).
type plainList struct{ cache.ListerWatcher }

func (plainList) IsWatchListSemanticsUnSupported() bool { return true }

// trim keeps what an endpoints controller's projection keeps of a Pod, about: the cache
// then holds small objects, and what a fill costs beyond them is the decoding of whole ones.
func trim(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion, Labels: p.Labels},
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status:     corev1.PodStatus{PodIP: p.Status.PodIP, Phase: p.Status.Phase},
	}, nil
}

// fill is what one informer's first fill cost this process: heap bytes allocated, the
// highest heap in use seen (sampled every 2 ms), and the heap still held once collected.
type fill struct {
	objects            int
	alloc, peak, after uint64
	took               time.Duration
}

func measureFill(t *testing.T, inf cache.SharedIndexInformer) fill {
	t.Helper()
	_ = inf.SetTransform(trim)
	runtime.GC()
	debug.FreeOSMemory()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	took := time.Since(start)
	close(stop)
	wg.Wait()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	f := fill{objects: len(inf.GetStore().ListKeys()), alloc: after.TotalAlloc - before.TotalAlloc, took: took}
	if p := peak.Load(); p > before.HeapInuse {
		f.peak = p - before.HeapInuse
	}
	if after.HeapAlloc > before.HeapAlloc {
		f.after = after.HeapAlloc - before.HeapAlloc
	}
	runtime.KeepAlive(inf)
	return f
}

func mib(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// TestShardFillMemory: with the apiserver gate on, a shard (1 of 4) fills its Pod cache with
// the shard's Pods only, says mode "server", and never lists them whole: the only lists it
// sends are probes of one object; the apiserver's streaming list with the shard's selector
// carries the shard's Pods only (KCM_SPLIT_SHARD_MEMORY_GATE=off: gate off, mode "client",
// every Pod streamed, and dropped here one by one). Printed (never asserted, the heap depends on the GC's
// timing): what the fill cost this process against one replica's informer (client-go's,
// streaming) and against the same shard listing then watching (the former behaviour).
// KCM_SPLIT_SHARD_MEMORY_PODS sets the number of Pods (default 1,200).
// Over 80 lines: three fills of one set of Pods, measured and compared side by side in one table.
func TestShardFillMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("real apiserver")
	}
	n := 1200
	if s := os.Getenv("KCM_SPLIT_SHARD_MEMORY_PODS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	gate, wantMode := "true", sharding.ModeServer
	if os.Getenv("KCM_SPLIT_SHARD_MEMORY_GATE") == "off" {
		gate, wantMode = "false", sharding.ModeClient
	}
	start := time.Now()
	e, err := testenv.Start(testenv.Options{ExtraAPIServerArgs: []string{"--feature-gates=ShardedListAndWatch=" + gate}, AuditPolicy: readsAudited})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	t.Logf("control plane with ShardedListAndWatch=%s ready in %s", gate, time.Since(start).Round(time.Millisecond))
	c := e.Client(t)
	ctx := context.Background()

	// Names vary at the front: FNV-1a keeps the high bits of names that differ at the end.
	const namespaces = 24
	for i := range namespaces {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%02d-mem", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start = time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				ns := fmt.Sprintf("%02d-mem", i%namespaces)
				p := benchkit.RealisticPod(ns, fmt.Sprintf("p-%d", i), "app", "node-1", fmt.Sprintf("10.1.%d.%d", i/250, i%250+1))
				if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d Pods in %d namespaces created in %s", n, namespaces, time.Since(start).Round(time.Millisecond))

	shard := sharding.Shard{Index: 0, Count: 4}
	want := 0
	for i := range n {
		if shard.Owns(fmt.Sprintf("%02d-mem", i%namespaces)) {
			want++
		}
	}
	list := func(c kubernetes.Interface) sharding.ListFunc {
		return func(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
			return c.CoreV1().Pods("").List(ctx, o)
		}
	}
	watchFn := func(c kubernetes.Interface) sharding.WatchFunc {
		return func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Pods("").Watch(ctx, o)
		}
	}
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}

	// Each fill has its own client (user agent), so that the audit log tells its lists apart.
	agent := func(name string) kubernetes.Interface { return e.ClientAs(t, "shardmem-"+name) }
	wc := agent("whole")
	whole := measureFill(t, coreinformers.NewPodInformer(wc, metav1.NamespaceAll, 0, indexers))

	v := sharding.NewView(shard, "test", nil, logr.Discard())
	sc := agent("shard")
	streamed := measureFill(t, v.Informer("pods", &corev1.Pod{}, list(sc), watchFn(sc), nil, 0, nil))
	if mode := v.ResourceMode("pods"); mode != wantMode {
		t.Errorf("shard's mode %q with the gate %s, want %s", mode, gate, wantMode)
	}

	lc := agent("listed")
	old := sharding.NewView(shard, "test", nil, logr.Discard())
	listed := measureFill(t, cache.NewSharedIndexInformer(plainList{old.ListWatch("pods", list(lc), watchFn(lc), nil)}, &corev1.Pod{}, 0, indexers))

	if whole.objects != n || streamed.objects != want || listed.objects != want {
		t.Errorf("cached %d / %d / %d Pods, want %d (all) / %d / %d (the shard's)", whole.objects, streamed.objects, listed.objects, n, want, want)
	}
	// The shard's only lists are probes: limit=1.
	reads, err := e.Audit(testenv.ByUserAgentPrefix("shardmem-shard", "pods"))
	if err != nil {
		t.Fatal(err)
	}
	lists, streams := 0, 0
	for _, ev := range reads {
		u, err := url.Parse(ev.RequestURI)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if q.Get("shardSelector") != shard.Selector().String() {
			t.Errorf("the shard sent %s without its selector", ev.RequestURI)
		}
		switch {
		case ev.Verb == "list":
			lists++
			if q.Get("limit") != "1" {
				t.Errorf("the shard listed %s, want only probes with limit=1", ev.RequestURI)
			}
		case ev.Verb == "watch" && q.Get("sendInitialEvents") == "true":
			streams++
		}
	}
	if lists == 0 || streams == 0 {
		t.Errorf("the shard sent %d probes and %d streaming lists, want at least one of each", lists, streams)
	}

	// What the apiserver streams for the shard's selector, before any client-side check: with
	// the gate on, the initial events are the shard's Pods only.
	streamedByServer := initialEvents(t, sc, shard.Selector().String())
	if wantServer := map[string]int{sharding.ModeServer: want, sharding.ModeClient: n}[wantMode]; streamedByServer != wantServer {
		t.Errorf("the apiserver streamed %d initial Pods for the shard's selector, want %d (gate %s)", streamedByServer, wantServer, gate)
	}
	t.Logf("the apiserver streamed %d initial Pods of %d for the shard's selector (gate %s)", streamedByServer, n, gate)

	t.Logf("fill of the Pod cache, %d Pods (%d in shard %s), heap MiB: allocated / peak in use / held after GC, time", n, want, shard)
	for _, r := range []struct {
		name string
		f    fill
	}{{"one replica, streaming list (client-go informer)", whole}, {"shard, streaming list + probe (this view)", streamed}, {"shard, list then watch (before)", listed}} {
		t.Logf("  %-50s %6d objects  %7s / %7s / %7s MiB  %s", r.name, r.f.objects, mib(r.f.alloc), mib(r.f.peak), mib(r.f.after), r.f.took.Round(time.Millisecond))
	}
}

// initialEvents opens a streaming list of Pods with selector and counts the objects the
// apiserver sends before the end bookmark.
func initialEvents(t *testing.T, c kubernetes.Interface, selector string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	yes := true
	w, err := c.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{
		SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks: true, ShardSelector: selector,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	added := 0
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added:
			added++
		case watch.Bookmark:
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				return added
			}
		case watch.Error:
			t.Fatalf("streaming list: %v", ev.Object)
		}
	}
	t.Fatal("the streaming list ended before its end bookmark")
	return 0
}
