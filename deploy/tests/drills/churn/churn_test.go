package churn

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// t0 is the start of the synthetic timelines; at(s) is s seconds after it.
var t0 = time.Now().Add(-time.Hour)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestGapSlowLostCaughtUp(t *testing.T) {
	l := &Loop{name: "x", samples: []Sample{
		{What: "quick", At: at(0), Seen: at(0.2)},
		{What: "slow", At: at(1), Seen: at(4)},
		{What: "lost", At: at(5)},
	}}
	for _, tc := range []struct {
		w     Window
		gap   time.Duration
		n     int
		atMin bool // gap is at least (the lost change waits until now)
	}{
		{Window{Start: at(0), End: at(0.5)}, 200 * time.Millisecond, 1, false},
		// A change made before the window and answered during it counts.
		{Window{Start: at(2), End: at(2.5)}, 3 * time.Second, 1, false},
		{Window{Start: at(0.1), End: at(1)}, 3 * time.Second, 2, false},
		{Window{Start: at(4.5), End: at(4.8)}, 0, 0, false},
		{Window{Start: at(4.5), End: at(6)}, time.Hour - 5*time.Second, 1, true},
	} {
		g, n := l.Gap(tc.w)
		if n != tc.n || (!tc.atMin && g != tc.gap) || (tc.atMin && g < tc.gap) {
			t.Errorf("Gap(%v..%v) = %v over %d changes, want %v over %d", tc.w.Start.Sub(t0), tc.w.End.Sub(t0), g, n, tc.gap, tc.n)
		}
	}
	slow := l.Slow(Window{Start: at(0), End: at(10)}, time.Second)
	if len(slow) != 2 || slow[0].What != "slow" || slow[1].What != "lost" {
		t.Errorf("Slow = %v, want the slow and the lost change", slow)
	}
	if l.Lost() != 1 {
		t.Errorf("Lost = %d, want 1", l.Lost())
	}
	if !l.CaughtUp(at(0.5)) || l.CaughtUp(at(2)) {
		t.Error("CaughtUp: want true since 0.5 s (the slow change was answered), false since 2 s (only a lost one)")
	}
	l.paused.Store(true)
	if !l.CaughtUp(at(2)) {
		t.Error("a paused loop is caught up")
	}
}

func TestReportLost(t *testing.T) {
	r := Report{Controllers: []ControllerReport{{Name: "a", Lost: 2, EndStateOK: true}, {Name: "b", EndStateOK: false}, {Name: "c", EndStateOK: true}}}
	if r.Lost() != 3 {
		t.Errorf("Lost = %d, want 3 (2 changes, 1 end state)", r.Lost())
	}
	if s := r.String(); !strings.Contains(s, "churn a: 0 changes, longest gap 0.00s, 2 lost") || strings.Count(s, "\n") != 3 {
		t.Errorf("String = %q", s)
	}
}

func TestReportThin(t *testing.T) {
	r := Report{Controllers: []ControllerReport{
		{Name: "busy", Changes: 50, StepErrors: 5},
		{Name: "failing", Changes: 50, StepErrors: 6},
		{Name: "idle", Changes: 2},
	}}
	got := r.Thin(3)
	if len(got) != 2 || !strings.HasPrefix(got[0], "failing ") || !strings.HasPrefix(got[1], "idle ") {
		t.Errorf("Thin(3) = %q, want failing (over one step in ten failed) and idle (under 3 changes)", got)
	}
}

func TestNewChecksItsConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("no client: no error")
	}
	cl := fake.NewClientset() // New only builds
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Client: cl, Controllers: []string{"endpoint"}}, "unknown controller"},
		{Config{Client: cl}, "servicelb needs Config.Dynamic"},
		{Config{Client: cl, Controllers: []string{ServiceLB}}, "servicelb needs Config.Dynamic"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v): %v, want %q", tc.cfg.Controllers, err, tc.want)
		}
	}
	ch, err := New(Config{Client: cl, Controllers: []string{Quota, Endpoints}, Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ch.Loops() {
		names = append(names, l.Name())
	}
	if strings.Join(names, ",") != "endpoints,quota" || ch.Loop(NodeLifecycle) != nil || ch.nodes == nil {
		t.Errorf("loops %v (want endpoints,quota in All's order), fake Nodes %v (want some: the endpoints Pod's)", names, ch.nodes)
	}
	ch.Pause(ServiceLB) // not run: nothing
	if ch, _ := New(Config{Client: cl, Controllers: []string{Quota}}); ch.nodes != nil || ch.cfg.Prefix != "churn" {
		t.Errorf("quota alone: fake Nodes %v (want none), prefix %q", ch.nodes, ch.cfg.Prefix)
	}
}

// realNode creates a Node and its Lease as a kubelet would have, renewed an hour ago.
func realNode(t *testing.T, c kubernetes.Interface, name string) (nodeRV, leaseRV string) {
	t.Helper()
	ctx := context.Background()
	node, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hold, dur := name, int32(40)
	lease, err := c.CoordinationV1().Leases(nodeLeaseNamespace).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nodeLeaseNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &hold, LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: at(0)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node.ResourceVersion, lease.ResourceVersion
}

// TestFakeNodesLeaveARealNodeAlone runs the node lifecycle churn beside a real Node, with no
// node lifecycle controller: the fake kubelets renew only the fake Nodes' Leases, every
// silence is lost work, and Cleanup removes the fake Nodes and nothing else.
// Over 80 lines: one churn run beside one real Node, checked before, during and after Cleanup.
func TestFakeNodesLeaveARealNodeAlone(t *testing.T) {
	testenv.Require(t, env)
	ctx := context.Background()
	c := env.Client(t)
	nodeRV, leaseRV := realNode(t, c, "real-node")
	untouched := func(when string) {
		t.Helper()
		n, err := c.CoreV1().Nodes().Get(ctx, "real-node", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.CoordinationV1().Leases(nodeLeaseNamespace).Get(ctx, "real-node", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.ResourceVersion != nodeRV || l.ResourceVersion != leaseRV {
			t.Errorf("%s: the real Node or its Lease was written (resourceVersions %s, %s; were %s, %s)", when, n.ResourceVersion, l.ResourceVersion, nodeRV, leaseRV)
		}
	}

	ch, err := New(Config{Client: c, Prefix: "t1", Controllers: []string{NodeLifecycle}, NodeGrace: 2 * time.Second,
		NodeZone: "t1-zone", KubeletVersion: "v1.36.3", EffectTimeout: 3 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelKey + "=t1," + zoneLabel + "=t1-zone"})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 3 {
		t.Fatalf("%d fake Nodes labelled with the churn and the zone, want 3", len(nodes.Items))
	}
	for _, n := range nodes.Items {
		if v := n.Status.NodeInfo.KubeletVersion; v != "v1.36.3" {
			t.Errorf("fake Node %s reports kubelet version %q, want the configured v1.36.3", n.Name, v)
		}
	}
	lease := func(name string) time.Time {
		l, err := c.CoordinationV1().Leases(nodeLeaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Spec.RenewTime.Time
	}
	before := lease("t1-node-0")
	ch.Pause(NodeLifecycle)
	if err := ch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if after := lease("t1-node-0"); !after.After(before.Add(time.Second)) {
		t.Errorf("fake Node's Lease not renewed: %v then %v", before, after)
	}
	untouched("while the fake kubelets renew")

	// No controller: the silence is never acted on.
	ch.Resume(NodeLifecycle)
	deadline := time.Now().Add(20 * time.Second)
	for ch.Loop(NodeLifecycle).Lost() == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	rep := ch.Stop(ctx)
	if len(rep.Controllers) != 1 || rep.Controllers[0].Lost < 1 || rep.Lost() < 1 {
		t.Errorf("report %+v: want the silences lost", rep)
	}
	untouched("after the churn")

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := ch.Cleanup(cctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"t1-node-0", "t1-node-flap"} {
		if _, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Node %s after Cleanup: %v", name, err)
		}
		if _, err := c.CoordinationV1().Leases(nodeLeaseNamespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Lease %s after Cleanup: %v", name, err)
		}
	}
	untouched("after Cleanup")
}

// namespaceFinalizer plays the namespace controller while on: it empties and finalizes the
// terminating namespaces whose names begin with prefix.
func namespaceFinalizer(ctx context.Context, c kubernetes.Interface, prefix string, on *atomic.Bool) {
	for ctx.Err() == nil {
		if on.Load() {
			list, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if err == nil {
				for _, ns := range list.Items {
					if ns.DeletionTimestamp == nil || !strings.HasPrefix(ns.Name, prefix) {
						continue
					}
					_ = c.CoreV1().ConfigMaps(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
					ns.Spec.Finalizers = nil
					_, _ = c.CoreV1().Namespaces().Finalize(ctx, &ns, metav1.UpdateOptions{})
				}
			}
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// TestGapShowsAStoppedController stops a (test-played) namespace controller for 3 s: the
// churn's gap in that window covers it, the windows around it stay short, nothing is lost
// once the controller is back, and Cleanup leaves nothing.
func TestGapShowsAStoppedController(t *testing.T) {
	testenv.Require(t, env)
	ctx := context.Background()
	c := env.Client(t)
	var on atomic.Bool
	on.Store(true)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	go namespaceFinalizer(fctx, c, "t2-ns-", &on)

	ch, err := New(Config{Client: c, Prefix: "t2", Controllers: []string{Namespace}, EffectTimeout: 30 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	phase := func(name string, d time.Duration) Window {
		w := Window{Name: name, Start: time.Now()}
		time.Sleep(d)
		if err := ch.WaitCaughtUp(ctx, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		w.End = time.Now()
		return w
	}
	steady := phase("steady", 2*time.Second)
	on.Store(false)
	off := Window{Name: "controller stopped", Start: time.Now()}
	time.Sleep(3 * time.Second)
	off.End = time.Now()
	on.Store(true)
	back := phase("back", 0)
	after := phase("after", 2*time.Second)
	rep := ch.Stop(ctx)

	for _, line := range ch.GapTable([]Window{steady, off, back, after}) {
		t.Log(line)
	}
	if g, n := ch.Loop(Namespace).Gap(steady); g > time.Second || n < 2 {
		t.Errorf("steady: gap %v over %d changes, want under 1 s over several", g, n)
	}
	if g, _ := ch.Loop(Namespace).Gap(off); g < 2500*time.Millisecond {
		t.Errorf("controller stopped 3 s: gap %v, want at least 2.5 s (3 s less the pause between changes)", g)
	}
	if g := ch.GapMax(after); g > time.Second {
		t.Errorf("after: gap %v, want under 1 s", g)
	}
	if len(ch.SlowChanges([]Window{off}, 2*time.Second)) == 0 {
		t.Error("no slow change listed for the stop")
	}
	if rep.Lost() != 0 || !rep.Controllers[0].EndStateOK || rep.Controllers[0].Changes < 5 {
		t.Errorf("report %+v: want several changes, none lost", rep)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := ch.Cleanup(cctx); err != nil {
		t.Fatal(err)
	}
}
