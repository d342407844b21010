package nodelifecycle

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func guardOptions(fraction float64) Options {
	o := fastOptions() // period 1 s, grace 10 s: window 2.5 s
	o.PartitionUnknownFraction = fraction
	return o
}

// Off (the default), the guard holds nothing and decides nothing.
func TestPartitionGuardOff(t *testing.T) {
	g := newPartitionGuard(DefaultOptions())
	v := g.judge(t0, 2, []silence{{name: "a", unknown: true, silent: true}, {name: "b", unknown: true, silent: true}})
	if v.started || g.holds("a") {
		t.Errorf("guard off: verdict %+v, holds a %v", v, g.holds("a"))
	}
}

// Nodes falling silent within one window of one another count together: more than the
// fraction of all Nodes starts one episode; each held Node is released by its own sign of
// life, and those still silent a grace period after the first return are released to
// ordinary handling.
func TestPartitionGuardEpisode(t *testing.T) {
	g := newPartitionGuard(guardOptions(0.5))
	if g.window != 2500*time.Millisecond {
		t.Fatalf("window = %s, want a quarter of the grace period", g.window)
	}
	obs := func(silent ...string) []silence {
		var out []silence
		for _, n := range []string{"a", "b", "c", "d"} {
			out = append(out, silence{name: n, unknown: slices.Contains(silent, n), silent: slices.Contains(silent, n)})
		}
		return out
	}
	// Two of four: not more than half. Held while their windows run.
	v := g.judge(t0, 4, obs("a", "b"))
	if v.started || !g.holds("a") || !g.holds("b") || !v.next.Equal(t0.Add(g.window)) {
		t.Fatalf("two silent: verdict %+v", v)
	}
	// A third within the window (sliding: counted with a and b): an episode.
	v = g.judge(t0.Add(2*time.Second), 4, obs("a", "b", "c"))
	if !v.started || v.held != 3 {
		t.Fatalf("three silent within the window: verdict %+v", v)
	}
	// Past the windows: still held, nothing released, no deadline while none returned.
	v = g.judge(t0.Add(20*time.Second), 4, obs("a", "b", "c"))
	if v.started || v.ended || len(v.released) != 0 || v.held != 3 || !v.next.IsZero() || !g.holds("c") {
		t.Fatalf("held: verdict %+v", v)
	}
	// d falls silent during the episode: held at once.
	v = g.judge(t0.Add(21*time.Second), 4, obs("a", "b", "c", "d"))
	if v.held != 4 || !g.holds("d") {
		t.Fatalf("d during the episode: verdict %+v", v)
	}
	// a renews its Lease: returned, still held (its Ready is still Unknown), and the
	// others now have a grace period.
	back := t0.Add(30 * time.Second)
	o := obs("b", "c", "d")
	o[0] = silence{name: "a", unknown: true, signs: 1}
	v = g.judge(back, 4, o)
	if v.held != 3 || !g.holds("a") || !v.next.Equal(back.Add(10*time.Second)) {
		t.Fatalf("a back: verdict %+v", v)
	}
	// a posts Ready; b returns too.
	o = obs("c", "d")
	o[1].signs, o[1].unknown = 1, true
	v = g.judge(back.Add(time.Second), 4, o)
	if g.nodes["a"] != nil || !slices.Contains(v.resync, "a") || v.held != 2 || v.ended {
		t.Fatalf("a Ready, b back: verdict %+v", v)
	}
	// A grace period after the first return, c and d are released: ordinary silent Nodes.
	o = obs("c", "d")
	o[1].signs, o[1].unknown = 1, true
	v = g.judge(back.Add(10*time.Second), 4, o)
	if !v.ended || !slices.Equal(sortedCopy(v.released), []string{"c", "d"}) || g.holds("c") || g.holds("d") || !g.holds("b") {
		t.Fatalf("grace after the return: verdict %+v", v)
	}
	// Released Nodes are not counted again while they stay Unknown.
	v = g.judge(back.Add(11*time.Second), 4, o)
	if v.started || g.holds("c") {
		t.Fatalf("after the episode: verdict %+v", v)
	}
}

func sortedCopy(s []string) []string { return slices.Sorted(slices.Values(s)) }

// A held Node whose kubelet posts Ready before any round saw its Lease alone still counts
// as the first return: the others get their grace period from then, not for ever.
func TestPartitionGuardReturnStraightToReady(t *testing.T) {
	g := newPartitionGuard(guardOptions(0.5))
	silent := []silence{{name: "a", unknown: true, silent: true}, {name: "b", unknown: true, silent: true}}
	if v := g.judge(t0, 2, silent); !v.started {
		t.Fatalf("verdict %+v, want an episode", v)
	}
	back := t0.Add(20 * time.Second)
	v := g.judge(back, 2, []silence{{name: "a", signs: 1}, silent[1]})
	if v.held != 1 || !v.next.Equal(back.Add(10*time.Second)) {
		t.Fatalf("a back and Ready: verdict %+v, want b held until a grace period from now", v)
	}
	v = g.judge(back.Add(10*time.Second), 2, []silence{{name: "a", signs: 1}, silent[1]})
	if !v.ended || !slices.Equal(v.released, []string{"b"}) {
		t.Fatalf("a grace period later: verdict %+v, want b released and the episode over", v)
	}
}

// Silences further apart than the window are ordinary silent Nodes, however many.
func TestPartitionGuardSpreadSilences(t *testing.T) {
	g := newPartitionGuard(guardOptions(0.5))
	var silent []string
	for i, n := range []string{"a", "b", "c"} {
		silent = append(silent, n)
		var obs []silence
		for _, s := range silent {
			obs = append(obs, silence{name: s, unknown: true, silent: true})
		}
		obs = append(obs, silence{name: "d"})
		v := g.judge(t0.Add(time.Duration(i)*3*time.Second), 4, obs)
		if v.started {
			t.Fatalf("silences 3 s apart with a 2.5 s window started an episode at %s", n)
		}
		if i > 0 && !slices.Contains(v.released, silent[i-1]) {
			t.Errorf("%s not released once its window closed: %+v", silent[i-1], v)
		}
	}
}

// Through the monitor: with the guard on, all Nodes falling silent together are marked
// Unknown but none of their Pods is marked not Ready, none is queued for a NoExecute taint,
// one Event is recorded and the gauge says so. With the guard off (the default), the Pods
// are marked, as upstream.
func TestCheckAllNodesHoldsAPartition(t *testing.T) {
	for _, fraction := range []float64{0, 0.5} {
		t.Run(map[float64]string{0: "off", 0.5: "on"}[fraction], func(t *testing.T) {
			ctx := context.Background()
			pod := readyPod("p", "a")
			f := newFixture(t, guardOptions(fraction), readyNode("a", "z"), readyNode("b", "z"), readyNode("c", "z"), pod)
			f.c.checkAllNodes(ctx)
			f.clock.step(10*time.Second + time.Millisecond)
			f.c.checkAllNodes(ctx)
			f.refresh()
			// Rounds over the written state, past every window.
			for range 4 {
				f.clock.step(time.Second)
				f.c.checkAllNodes(ctx)
			}
			for _, n := range []string{"a", "b", "c"} {
				if r := nodeReadyCondition(&f.stored(n).Status); r.Status != v1.ConditionUnknown {
					t.Errorf("node %s is %s, want Unknown either way", n, r.Status)
				}
			}
			marked := podReadyStatus(f.storedPod("p")) == v1.ConditionFalse
			queued := f.c.zone("r:\x00:z").tainter.pending()
			evs := f.events()
			suspected := testutilGauge(t, f.c.metrics.partition)
			if fraction == 0 {
				if !marked || hasEvent(evs, ReasonPartitionSuspected) || suspected != 0 {
					t.Errorf("guard off: pod marked %v, events %v, gauge %v; want upstream's marking, no event", marked, evs, suspected)
				}
				return
			}
			if marked || queued != 0 || suspected != 1 {
				t.Errorf("guard on: pod marked %v, queued for taints %d, gauge %v", marked, queued, suspected)
			}
			n := 0
			for _, e := range evs {
				if hasEvent([]string{e}, ReasonPartitionSuspected+" 3 of 3 Nodes fell silent") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d PartitionSuspected events, want 1: %v", n, evs)
			}
			for _, name := range []string{"a", "b", "c"} {
				if !f.c.partition.holds(name) {
					t.Errorf("node %s not held", name)
				}
			}
		})
	}
}

func readyPod(name, node string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("u-" + name)},
		Spec:   v1.PodSpec{NodeName: node},
		Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}}
}

func (f *fixture) storedPod(name string) *v1.Pod {
	f.t.Helper()
	p, err := f.client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func podReadyStatus(p *v1.Pod) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status
		}
	}
	return ""
}

func testutilGauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	return testutil.ToFloat64(g)
}
