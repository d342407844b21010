package sharding

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

func pods(names ...string) []corev1.Pod {
	var out []corev1.Pod
	for _, ns := range names {
		out = append(out, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}})
	}
	return out
}

// namespaces returns n names that vary at the front: KEP-5866's hash (FNV-1a 64) keeps the
// high bits of names that differ only at the end, so "ns-0".."ns-39" all fall in one half.
func namespaces(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%d-app", i))
	}
	return out
}

// TestListFiltersAndReportsMode: a list with ShardInfo is the server's work, one without
// the client's; either way only the shard's namespaces come out, and the selector was sent.
func TestListFiltersAndReportsMode(t *testing.T) {
	shard := Shard{Index: 1, Count: 3}
	for _, server := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		v := NewView(shard, "b", reg, logr.Discard())
		var sent string
		lw := v.ListWatch("pods", func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			sent = o.ShardSelector
			l := &corev1.PodList{Items: pods(namespaces(50)...)}
			if server {
				l.ShardInfo = &metav1.ShardInfo{Selector: o.ShardSelector}
			}
			return l, nil
		}, nil, func(o *metav1.ListOptions) { o.LabelSelector = "a=b" })
		obj, err := cache.ToListerWatcherWithContext(lw).ListWithContext(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sent != shard.Selector().String() {
			t.Errorf("sent selector %q, want %q", sent, shard.Selector().String())
		}
		items := obj.(*corev1.PodList).Items
		if len(items) == 0 || len(items) == 50 {
			t.Errorf("server=%t: %d of 50 namespaces kept", server, len(items))
		}
		for _, p := range items {
			if !shard.Owns(p.Namespace) {
				t.Errorf("kept %s, not the shard's", p.Namespace)
			}
		}
		want := map[bool]string{true: ModeServer, false: ModeClient}[server]
		if v.Mode() != want {
			t.Errorf("server=%t: mode %s, want %s", server, v.Mode(), want)
		}
		if got := testutil.ToFloat64(v.info.WithLabelValues("b", "1", "3", "pods", want)); got != 1 {
			t.Errorf("kcm_split_shard_info{mode=%s} = %v", want, got)
		}
		if n := testutil.CollectAndCount(v.info); n != 1 {
			t.Errorf("%d series of kcm_split_shard_info, want 1 (the mode in force)", n)
		}
	}
}

func TestWatchDropsOtherShardsEvents(t *testing.T) {
	shard := Shard{Index: 0, Count: 2}
	v := NewView(shard, "b", nil, logr.Discard())
	fw := watch.NewFake()
	lw := v.ListWatch("pods", nil, func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil }, nil)
	w, err := cache.ToListerWatcherWithContext(lw).WatchWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for _, p := range pods(namespaces(40)...) {
			fw.Add(&p)
		}
		fw.Action(watch.Bookmark, &corev1.Pod{})
		fw.Stop()
	}()
	owned, bookmarks := 0, 0
	for ev := range w.ResultChan() {
		if ev.Type == watch.Bookmark {
			bookmarks++
			continue
		}
		p := ev.Object.(*corev1.Pod)
		if !shard.Owns(p.Namespace) {
			t.Errorf("event of %s passed", p.Namespace)
		}
		owned++
	}
	if owned == 0 || owned == 40 || bookmarks != 1 {
		t.Errorf("%d of 40 events passed, %d bookmarks", owned, bookmarks)
	}
}

// TestInformerStreamsAndProbes: the reflector fills the cache with a streaming list (a watch
// with the initial events), never a whole list; a list of at most one object before it says
// the mode; the cache holds the shard's namespaces only.
func TestInformerStreamsAndProbes(t *testing.T) {
	shard := Shard{Index: 0, Count: 2}
	for _, server := range []bool{true, false} {
		v := NewView(shard, "b", nil, logr.Discard())
		var limits []int64
		var mu sync.Mutex
		fw := watch.NewFake()
		inf := v.Informer("pods", &corev1.Pod{}, func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			mu.Lock()
			limits = append(limits, o.Limit)
			mu.Unlock()
			l := &corev1.PodList{}
			if server {
				l.ShardInfo = &metav1.ShardInfo{Selector: o.ShardSelector}
			}
			return l, nil
		}, func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents == nil || !*o.SendInitialEvents {
				return watch.NewFake(), nil
			}
			go func() {
				for _, p := range pods(namespaces(40)...) {
					p.ResourceVersion = "5"
					fw.Add(&p)
				}
				fw.Action(watch.Bookmark, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
					ResourceVersion: "10", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
			}()
			return fw, nil
		}, nil, 0, nil)
		ctx, cancel := context.WithCancel(context.Background())
		go inf.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("not synced")
		}
		keys := inf.GetStore().ListKeys()
		if len(keys) == 0 || len(keys) == 40 {
			t.Errorf("server=%t: %d of 40 namespaces cached", server, len(keys))
		}
		for _, o := range inf.GetStore().List() {
			if p := o.(*corev1.Pod); !shard.Owns(p.Namespace) {
				t.Errorf("cached %s, not the shard's", p.Namespace)
			}
		}
		mu.Lock()
		if len(limits) == 0 {
			t.Errorf("server=%t: no probe before the streaming list", server)
		}
		for _, l := range limits {
			if l != 1 {
				t.Errorf("server=%t: a list with limit %d (want only probes of 1)", server, l)
			}
		}
		mu.Unlock()
		want := map[bool]string{true: ModeServer, false: ModeClient}[server]
		if v.Mode() != want {
			t.Errorf("server=%t: mode %s, want %s", server, v.Mode(), want)
		}
		cancel()
	}
}

// TestProbeFailureKeepsMode: a failed probe leaves the mode as it was (unknown is not client),
// and the watch still starts.
func TestProbeFailureKeepsMode(t *testing.T) {
	v := NewView(Shard{Index: 1, Count: 2}, "b", nil, logr.Discard())
	started := false
	lw := v.ListWatch("pods", func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return nil, errors.New("apiserver unreachable")
	}, func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		started = true
		return watch.NewFake(), nil
	}, nil)
	yes := true
	if _, err := cache.ToListerWatcherWithContext(lw).WatchWithContext(context.Background(), metav1.ListOptions{SendInitialEvents: &yes}); err != nil {
		t.Fatal(err)
	}
	if !started || v.ResourceMode("pods") != ModeUnknown {
		t.Errorf("watch started %t, mode %s after a failed probe (want unknown)", started, v.ResourceMode("pods"))
	}
}

// TestWithProbeDecidesMode: an informer whose lists cannot carry ShardInfo (metadata only)
// takes the mode from its probe, typed or unstructured.
func TestWithProbeDecidesMode(t *testing.T) {
	for name, probe := range map[string]runtime.Object{
		"typed":        &metav1.List{ListMeta: metav1.ListMeta{ShardInfo: &metav1.ShardInfo{Selector: "x"}}},
		"unstructured": &unstructured.UnstructuredList{Object: map[string]any{"metadata": map[string]any{"shardInfo": map[string]any{"selector": "x"}}}},
	} {
		v := NewView(Shard{Index: 0, Count: 2}, "b", nil, logr.Discard())
		lw := v.ListWatch("configmaps", func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &metav1.PartialObjectMetadataList{}, nil
		}, nil, nil, WithProbe(func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if o.Limit != 1 || o.ShardSelector == "" {
				t.Errorf("%s: probe sent limit %d, selector %q", name, o.Limit, o.ShardSelector)
			}
			return probe, nil
		}))
		if _, err := cache.ToListerWatcherWithContext(lw).ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if v.Mode() != ModeServer {
			t.Errorf("%s: mode %s, want server (from the probe)", name, v.Mode())
		}
	}
}

// TestMixedHashSendsNoSelectorNorProbe: a shard of a hash the apiserver cannot compute sends no
// selector, lists no probe before its streaming list, reports client from the start (even if a
// list came back with ShardInfo, which an apiserver only sets for a selector it was sent), and
// keeps its own namespaces by that hash.
func TestMixedHashSendsNoSelectorNorProbe(t *testing.T) {
	shard := Shard{Index: 1, Count: 3, Hash: HashMixed}
	reg := prometheus.NewRegistry()
	v := NewView(shard, "b", reg, logr.Discard())
	lists := 0
	fw := watch.NewFake()
	lw := v.ListWatch("pods", func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
		lists++
		if o.ShardSelector != "" {
			t.Errorf("list sent selector %q", o.ShardSelector)
		}
		return &corev1.PodList{ListMeta: metav1.ListMeta{ShardInfo: &metav1.ShardInfo{Selector: "x"}}, Items: pods(familyNames("tenant-%04d", 60)...)}, nil
	}, func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
		if o.ShardSelector != "" {
			t.Errorf("watch sent selector %q", o.ShardSelector)
		}
		return fw, nil
	}, nil)
	if v.Mode() != ModeClient {
		t.Errorf("mode %s before any list, want client", v.Mode())
	}
	yes := true
	if _, err := cache.ToListerWatcherWithContext(lw).WatchWithContext(context.Background(), metav1.ListOptions{SendInitialEvents: &yes}); err != nil {
		t.Fatal(err)
	}
	if lists != 0 {
		t.Errorf("%d probes before the streaming list, want none", lists)
	}
	obj, err := cache.ToListerWatcherWithContext(lw).ListWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items := obj.(*corev1.PodList).Items
	// A third of 60 names of one family, give or take: the KEP's hash would give 0 or 60.
	if len(items) < 10 || len(items) > 30 {
		t.Errorf("%d of 60 tenant namespaces kept by shard 1 of 3", len(items))
	}
	for _, p := range items {
		if !shard.Owns(p.Namespace) {
			t.Errorf("kept %s, not the shard's", p.Namespace)
		}
	}
	if v.Mode() != ModeClient {
		t.Errorf("mode %s after a list, want client", v.Mode())
	}
	if got := testutil.ToFloat64(v.info.WithLabelValues("b", "1", "3", "pods", ModeClient)); got != 1 {
		t.Errorf("kcm_split_shard_info{mode=client} = %v", got)
	}
}

func familyNames(format string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(format, i))
	}
	return out
}

// TestObjectsCounted: kcm_split_shard_objects is the number of objects the shard's informer
// caches, and kcm_split_shard_largest_namespace_objects names its largest namespace, both
// following adds and deletes.
func TestObjectsCounted(t *testing.T) {
	shard := Shard{Index: 0, Count: 2, Hash: HashMixed}
	reg := prometheus.NewRegistry()
	v := NewView(shard, "b", reg, logr.Discard())
	// Two namespaces of the shard: the big one with 5 Pods, the small one with 2; and one of
	// the other shard, never cached.
	var mine, other []string
	for _, ns := range familyNames("ns-%d", 50) {
		if shard.Owns(ns) {
			mine = append(mine, ns)
		} else {
			other = append(other, ns)
		}
	}
	big, small := mine[0], mine[1]
	var initial []corev1.Pod
	for i := range 5 {
		initial = append(initial, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: big, Name: fmt.Sprint("p", i), ResourceVersion: "5"}})
	}
	for i := range 2 {
		initial = append(initial, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: small, Name: fmt.Sprint("p", i), ResourceVersion: "5"}})
	}
	initial = append(initial, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: other[0], Name: "p", ResourceVersion: "5"}})
	fw := watch.NewFake()
	inf := v.Informer("pods", &corev1.Pod{}, func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}, Items: initial}, nil
	}, func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
		if o.SendInitialEvents != nil && *o.SendInitialEvents {
			return nil, errors.New("no streaming lists here") // the reflector falls back to a list
		}
		return fw, nil
	}, nil, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("not synced")
	}
	// want polls (handlers run asynchronously) for the two series.
	want := func(objects, largest int, ns string) {
		t.Helper()
		var got string
		for range 100 {
			got = objectSeries(t, reg)
			if got == fmt.Sprintf("objects=%d largest=%s:%d", objects, ns, largest) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("got %s, want objects=%d largest=%s:%d", got, objects, ns, largest)
	}
	want(7, 5, big)
	// The small namespace grows past the big one, which shrinks; another shard's Pod never counts.
	for i := range 4 {
		fw.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: small, Name: fmt.Sprint("q", i), ResourceVersion: fmt.Sprint(10 + i)}})
	}
	fw.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: other[0], Name: "q", ResourceVersion: "20"}})
	fw.Delete(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: big, Name: "p0", ResourceVersion: "21"}})
	want(10, 6, small)
}

// objectSeries reads the shard's pods count and largest namespace from reg, as
// "objects=N largest=NS:M".
func objectSeries(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	objects, largest := "?", "?"
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["binary"] != "b" || labels["shard"] != "0" || labels["shards"] != "2" || labels["resource"] != "pods" {
				t.Errorf("%s: labels %v", mf.GetName(), labels)
			}
			switch mf.GetName() {
			case "kcm_split_shard_objects":
				objects = fmt.Sprint(m.GetGauge().GetValue())
			case "kcm_split_shard_largest_namespace_objects":
				largest = fmt.Sprintf("%s:%v", labels["namespace"], m.GetGauge().GetValue())
			}
		}
	}
	return "objects=" + objects + " largest=" + largest
}
