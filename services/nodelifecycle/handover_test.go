package nodelifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
)

const stateNS, stateName = "kube-system", "nodelifecycle-controller" + StateStoreSuffix

// episodeReleased runs a partition episode on a fixture: a, b, c fall silent together and
// are held; a's Lease is renewed (it returned); a grace period later b and c are released.
// It returns the fixture and a's Lease as last renewed.
func episodeReleased(t *testing.T) (*fixture, *coordv1.Lease) {
	t.Helper()
	ctx := context.Background()
	f := newFixture(t, guardOptions(0.5), readyNode("a", "z"), readyNode("b", "z"), readyNode("c", "z"), readyPod("p", "c"))
	f.c.checkAllNodes(ctx)
	f.clock.step(10*time.Second + time.Millisecond)
	f.c.checkAllNodes(ctx)
	f.refresh()
	for range 4 {
		f.clock.step(time.Second)
		f.c.checkAllNodes(ctx)
	}
	if !f.c.partition.holds("b") || testutilGauge(t, f.c.metrics.partition) != 1 {
		t.Fatal("no episode")
	}
	// a's Lease is renewed from now on (its kubelet does not post status: a stays Unknown).
	var l *coordv1.Lease
	for i := range 12 {
		l = lease("a", f.clock.now())
		f.c.health.observeLease(l)
		f.c.checkAllNodes(ctx) // a returned; a grace period later, b and c released
		if i < 11 {
			f.clock.step(time.Second)
		}
	}
	f.refresh()
	f.c.checkAllNodes(ctx)
	if f.c.partition.holds("b") || f.c.partition.holds("c") || !f.c.partition.holds("a") {
		t.Fatalf("after the grace period: holds a %v b %v c %v", f.c.partition.holds("a"), f.c.partition.holds("b"), f.c.partition.holds("c"))
	}
	if podReadyStatus(f.storedPod("p")) != v1.ConditionFalse {
		t.Fatal("the released node's pod is not marked")
	}
	return f, l
}

// successor is the next leader: the Nodes as the cluster holds them, the same Leases, the
// ConfigMap kept (if any), its clock a little later; its pod on c Ready again (someone, or a
// kubelet, set it), to see whether the next leader marks it.
func successor(t *testing.T, prev *fixture, kept *v1.ConfigMap, leases ...*coordv1.Lease) *fixture {
	t.Helper()
	objs := []runtime.Object{readyPod("p", "c")}
	list, err := prev.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	if kept != nil {
		objs = append(objs, kept)
	}
	f := newFixture(t, prev.c.opts, objs...)
	// Its term starts now: every Node seen for the first time gets a full grace period.
	f.clock.t = prev.clock.now().Add(3 * time.Second)
	f.c.health.restartGrace()
	for _, l := range leases {
		f.c.health.observeLease(l)
	}
	if err := f.c.keepStateIn(f.client.CoreV1().ConfigMaps(stateNS), stateName); err != nil {
		t.Fatal(err)
	}
	return f
}

func keptConfigMap(t *testing.T, s keptState) *v1.ConfigMap {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: stateNS, Name: stateName}, Data: map[string]string{StateStoreKey: string(b)}}
}

// TestHandoverKeepsReleasedNodesReleased: what the guard released stays released with the
// next leader, which marks the released Node's Pods at its first round, as the previous one
// did every round; a Node not kept stays held; no new episode. Without the kept state the
// next leader finds every Unknown Node silent at once, together: a new episode holds them all
// (the behaviour before issue 49).
func TestHandoverKeepsReleasedNodesReleased(t *testing.T) {
	for _, keep := range []bool{true, false} {
		t.Run(fmt.Sprintf("kept=%v", keep), func(t *testing.T) {
			ctx := context.Background()
			a, l := episodeReleased(t)
			var cm *v1.ConfigMap
			if keep {
				s := a.c.snapshotState()
				s.Observed = a.clock.now()
				cm = keptConfigMap(t, s)
				if s.Partition == nil || s.Partition.Nodes["b"].State != keptReleased || s.Partition.Nodes["c"].State != keptReleased {
					st, ra := a.c.partition.standing()
					t.Fatalf("kept %+v; standing %v %s", s.Partition, st, ra)
				}
			}
			b := successor(t, a, cm, l)
			b.c.loadState(ctx)
			b.c.checkAllNodes(ctx)
			marked := podReadyStatus(b.storedPod("p")) == v1.ConditionFalse
			if keep != marked || keep == b.c.partition.holds("c") {
				t.Fatalf("kept %v: pod marked %v, c held %v", keep, marked, b.c.partition.holds("c"))
			}
			if !b.c.partition.holds("a") {
				t.Error("a node not kept is not held")
			}
			// Without it, every Node found Unknown is silent at once for the new leader: they
			// fall silent together, a new episode.
			if evs := b.events(); hasEvent(evs, ReasonPartitionSuspected) == keep || (testutilGauge(t, b.c.metrics.partition) == 1) == keep {
				t.Errorf("kept %v: events %v, gauge %v", keep, evs, testutilGauge(t, b.c.metrics.partition))
			}
		})
	}
}

// TestKeptStandingNeedsWhatTheWriterSaw: a released or held Node is believed only with the
// same UID, still Unknown, and the same signs of life the writer saw; a held one seen renewed
// since has returned (and starts the others' grace period now); a stale record, or one from
// a clock ahead, is not believed at all.
func TestKeptStandingNeedsWhatTheWriterSaw(t *testing.T) {
	ctx := context.Background()
	unknown := func(name string) *v1.Node {
		n := readyNode(name, "z")
		n.Status.Conditions[0].Status = v1.ConditionUnknown
		return n
	}
	renew := t0.Add(-time.Minute)
	nodes := []runtime.Object{unknown("same"), unknown("renewed"), unknown("other-uid"), unknown("held-renewed"), unknown("held-same"), readyNode("ready", "z")}
	hold := func(state string, r time.Time) keptHold {
		hb := t0 // readyNode's heartbeat
		return keptHold{State: state, Renew: &r, Heartbeat: &hb}
	}
	record := func(observed time.Time) keptState {
		p := &keptPartition{Nodes: map[string]keptHold{}}
		for _, n := range []string{"same", "renewed", "other-uid", "held-renewed", "held-same", "ready"} {
			st := keptReleased
			if n == "held-renewed" || n == "held-same" {
				st = keptHeld
			}
			k := hold(st, renew)
			k.UID = types.UID("uid-" + n)
			if n == "other-uid" {
				k.UID = "uid-gone"
			}
			p.Nodes[n] = k
		}
		return keptState{Observed: observed, Partition: p}
	}
	for _, c := range []struct {
		name     string
		observed time.Duration
		believed bool
	}{
		{"fresh", -time.Second, true},
		{"stale", -stateStaleAfter - time.Second, false},
		{"ahead", stateMaxSkew + time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, guardOptions(0.5), nodes...)
			for _, n := range []string{"same", "other-uid", "ready", "held-same"} {
				f.c.health.observeLease(lease(n, renew))
			}
			f.c.health.observeLease(lease("renewed", renew.Add(time.Second)))
			f.c.health.observeLease(lease("held-renewed", renew.Add(time.Second)))
			if err := f.client.Tracker().Add(keptConfigMap(t, record(t0.Add(c.observed)))); err != nil {
				t.Fatal(err)
			}
			if err := f.c.keepStateIn(f.client.CoreV1().ConfigMaps(stateNS), stateName); err != nil {
				t.Fatal(err)
			}
			f.c.loadState(ctx)
			if got := !f.c.partition.holds("same"); got != c.believed {
				t.Errorf("same signs of life: released %v, want %v", got, c.believed)
			}
			for _, n := range []string{"renewed", "other-uid", "ready"} {
				if !f.c.partition.holds(n) {
					t.Errorf("%s released by a kept record", n)
				}
			}
			states, returnedAt := f.c.partition.standing()
			if c.believed && (states["held-renewed"] != holdReturned || states["held-same"] != holdHeld || !returnedAt.Equal(t0) || testutilGauge(t, f.c.metrics.partition) != 1) {
				t.Errorf("held and renewed since: %v, returned at %s; held: %v; want returned now, an episode", states["held-renewed"], returnedAt, states["held-same"])
			}
			if !c.believed && len(states) != 0 {
				t.Errorf("not believed, yet standing %v", states)
			}
		})
	}
}

// TestUnreadableStateNeverReleases: a record that cannot be read or parsed releases nothing
// and makes every zone's first NoExecute taint of the term wait one interval.
func TestUnreadableStateNeverReleases(t *testing.T) {
	ctx := context.Background()
	for _, c := range []string{"forbidden", "does not parse"} {
		t.Run(c, func(t *testing.T) {
			o := guardOptions(0.5)
			o.KeepEvictionPace = true
			f := newFixture(t, o, readyNode("a", "z"))
			cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: stateNS, Name: stateName}, Data: map[string]string{StateStoreKey: "{"}}
			if err := f.client.Tracker().Add(cm); err != nil {
				t.Fatal(err)
			}
			if c == "forbidden" {
				f.client.PrependReactor("get", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, stateName, errors.New("no"))
				})
			}
			if err := f.c.keepStateIn(f.client.CoreV1().ConfigMaps(stateNS), stateName); err != nil {
				t.Fatal(err)
			}
			f.c.loadState(ctx)
			if !f.c.partition.holds("a") || !f.c.inheritAll.Equal(t0) {
				t.Fatalf("holds a %v, pace from %s", f.c.partition.holds("a"), f.c.inheritAll)
			}
			f.c.ensureZone(ctx, "r:\x00:z")
			z := f.c.zone("r:\x00:z").tainter
			z.add("a", t0.Add(-time.Minute))
			if _, ok := z.next(t0.Add(9 * time.Second)); ok {
				t.Error("tainted within one interval of the term's start")
			}
			if _, ok := z.next(t0.Add(10 * time.Second)); !ok {
				t.Error("not tainted one interval after the term's start")
			}
		})
	}
}

// TestZoneTainterInheritsPace: the first taint of a term waits for the rate after the
// previous holder's last one; later ones follow the limiter; a zone without a kept time
// taints at once, as upstream.
func TestZoneTainterInheritsPace(t *testing.T) {
	z := newZoneTainter(0.1, 0)
	z.inherit(t0)
	for _, n := range []string{"a", "b"} {
		z.add(n, t0)
	}
	if got := drain(z, t0.Add(9*time.Second)); len(got) != 0 {
		t.Fatalf("within the interval after the inherited taint: %v", got)
	}
	if got := drain(z, t0.Add(10*time.Second)); len(got) != 1 || !z.lastTaint().Equal(t0.Add(10*time.Second)) {
		t.Fatalf("one interval later: %v, last %s", got, z.lastTaint())
	}
	if got := drain(z, t0.Add(19*time.Second)); len(got) != 0 {
		t.Fatalf("the limiter's interval: %v", got)
	}
	fresh := newZoneTainter(0.1, 0)
	fresh.add("a", t0)
	if got := drain(fresh, t0); len(got) != 1 {
		t.Fatalf("no inherited taint: %v, want one at once", got)
	}
}

// TestPaceSurvivesHandover: the last taint time kept per zone reaches the next leader's
// zone, clamped to its clock.
func TestPaceSurvivesHandover(t *testing.T) {
	ctx := context.Background()
	o := fastOptions()
	o.KeepEvictionPace = true
	f := newFixture(t, o, readyNode("a", "z"), readyNode("b", "y"))
	if err := f.client.Tracker().Add(keptConfigMap(t, keptState{Observed: t0, Zones: map[string]time.Time{
		"r:\x00:z": t0.Add(-4 * time.Second), "r:\x00:y": t0.Add(time.Hour),
	}})); err != nil {
		t.Fatal(err)
	}
	if err := f.c.keepStateIn(f.client.CoreV1().ConfigMaps(stateNS), stateName); err != nil {
		t.Fatal(err)
	}
	f.c.loadState(ctx)
	f.c.checkAllNodes(ctx)
	if got := f.c.zone("r:\x00:z").tainter.lastTaint(); !got.Equal(t0.Add(-4 * time.Second)) {
		t.Errorf("zone z inherited %s", got)
	}
	if got := f.c.zone("r:\x00:y").tainter.lastTaint(); !got.Equal(t0) {
		t.Errorf("zone y inherited %s, want a time from the future clamped to now", got)
	}
	if !f.c.saveState(ctx) {
		t.Fatal("save failed")
	}
	cm, err := f.client.CoreV1().ConfigMaps(stateNS).Get(ctx, stateName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var s keptState
	if err := json.Unmarshal([]byte(cm.Data[StateStoreKey]), &s); err != nil || !s.Zones["r:\x00:z"].Equal(t0.Add(-4*time.Second)) || s.Partition != nil {
		t.Fatalf("written %+v (%v)", s, err)
	}
}

// TestKeptStateIsBounded: over its bounds, held and returned Nodes go first (a Node not
// judged is held anyway), then released ones by name from the end.
func TestKeptStateIsBounded(t *testing.T) {
	s := keptState{Partition: &keptPartition{Nodes: map[string]keptHold{}}}
	for i := range stateMaxNodes {
		s.Partition.Nodes[fmt.Sprintf("held-%05d", i)] = keptHold{State: keptHeld}
		s.Partition.Nodes[fmt.Sprintf("rel-%05d", i)] = keptHold{State: keptReleased}
	}
	_, dropped, err := s.bound()
	if err != nil || dropped != stateMaxNodes || len(s.Partition.Nodes) != stateMaxNodes {
		t.Fatalf("dropped %d (%v), %d left", dropped, err, len(s.Partition.Nodes))
	}
	for name, k := range s.Partition.Nodes {
		if k.State != keptReleased {
			t.Fatalf("%s kept before released ones", name)
		}
	}
	r := time.Now()
	for i := range 2 * stateMaxNodes {
		s.Partition.Nodes[fmt.Sprintf("rel-%05d", i)] = keptHold{State: keptReleased, UID: "0123456789abcdef0123456789abcdef01234567", Renew: &r, Heartbeat: &r}
	}
	b, _, err := s.bound()
	if err != nil || len(b) > stateMaxBytes || len(s.Partition.Nodes) > stateMaxNodes {
		t.Fatalf("%d bytes, %d nodes (%v)", len(b), len(s.Partition.Nodes), err)
	}
	if _, ok := s.Partition.Nodes["rel-00000"]; !ok {
		t.Error("dropped from the start, want from the end")
	}
}

// TestSignsOfLifeSurviveHandover: with --keep-signs-of-life the last sign of life of a Node
// silent for a while reaches the next leader, whose deadline for it is then the previous
// leader's; it is not taken from a record in the reader's future, for a Node seen renewed
// since, or for another Node of the same name; a healthy Node is not written.
func TestSignsOfLifeSurviveHandover(t *testing.T) {
	ctx := context.Background()
	o := fastOptions() // grace 10 s: kept once silent 2.5 s
	o.KeepSignsOfLife = true
	a := newFixture(t, o, readyNode("dead", "z"), readyNode("alive", "z"))
	a.c.health.observeLease(lease("dead", t0))
	a.c.checkAllNodes(ctx)
	a.clock.step(3 * time.Second)
	a.c.health.observeLease(lease("alive", a.clock.now()))
	s := a.c.snapshotState()
	s.Observed = a.clock.now()
	if _, ok := s.Silent["alive"]; ok || !s.Silent["dead"].Last.Equal(t0) {
		t.Fatalf("kept %+v", s.Silent)
	}
	for _, c := range []struct {
		name   string
		edit   func(*keptState)
		renew  time.Time
		shared bool
	}{
		{name: "believed", renew: t0, shared: true},
		{name: "renewed since", renew: t0.Add(time.Second)},
		{name: "another node", renew: t0, edit: func(s *keptState) { k := s.Silent["dead"]; k.UID = "uid-old"; s.Silent["dead"] = k }},
		{name: "in the future", renew: t0, edit: func(s *keptState) { k := s.Silent["dead"]; k.Last = t0.Add(time.Minute); s.Silent["dead"] = k }},
	} {
		t.Run(c.name, func(t *testing.T) {
			kept := s
			kept.Silent = map[string]keptSign{"dead": s.Silent["dead"]}
			if c.edit != nil {
				c.edit(&kept)
			}
			b := successor(t, a, keptConfigMap(t, kept), lease("dead", c.renew))
			b.c.loadState(ctx)
			h, _ := b.c.health.get("dead")
			want := b.clock.now()
			if c.shared {
				want = t0
			}
			if c.name == "renewed since" {
				want = h.lastSignOfLife // its own sighting: the renewal
			}
			if !h.lastSignOfLife.Equal(want) || (c.shared != h.lastSignOfLife.Equal(t0)) {
				t.Fatalf("last sign of life %s, want %s", h.lastSignOfLife, want)
			}
			// The deadline is the previous leader's: 10 s after t0, i.e. 4 s after b starts.
			b.clock.step(4*time.Second + time.Millisecond)
			b.c.checkAllNodes(ctx)
			unknown := nodeReadyCondition(&b.stored("dead").Status).Status == v1.ConditionUnknown
			if unknown != c.shared {
				t.Fatalf("Unknown 4 s into b's term: %v, want %v", unknown, c.shared)
			}
		})
	}
}
