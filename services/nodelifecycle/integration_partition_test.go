package nodelifecycle_test

// The partition drill (issue 34): kwok plays the kubelets of four Nodes, two kwok processes
// of two Nodes each; both are frozen at once, so every Node's Lease stops together, as when
// the control plane loses its network to the Nodes. Without --partition-unknown-fraction the
// controller does what upstream does (every Pod marked not Ready); with it, nothing is done
// to the Nodes and their Pods, one Event and a gauge say why, and each Node is handled as
// usual again as its own Lease returns. Timings are logged, never asserted.

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Drill timings: kwok's Leases last 4 s and are renewed every second (a quarter, as kubelets
// do); the grace period is longer than a Lease, as it must be, which makes the guard's window
// (a quarter of the grace period) longer than a renewal interval.
const (
	drillLease = 4
	drillGrace = 6 * time.Second
)

var drillTimings = []string{"--node-monitor-period=1s", "--node-monitor-grace-period=" + drillGrace.String(), "--node-startup-grace-period=" + drillGrace.String()}

// drillLabel marks the drill's Nodes; drillGroupLabel says which kwok plays their kubelet.
const (
	drillLabel      = "kcm-split.test/drill"
	drillGroupLabel = "kcm-split.test/drill-group"
)

// startKwok runs kwok for the Nodes matching labelSelector, renewing their Leases every
// leaseSeconds/4. Skipped when `make tools` has not built kwok.
func startKwok(t *testing.T, name, labelSelector string, leaseSeconds int) *testenv.Process {
	t.Helper()
	if err := testenv.KwokBuilt(); err != nil {
		t.Skip(err)
	}
	return env.StartKwok(t, testenv.Kwok{Name: name, Manage: "--manage-nodes-with-label-selector=" + labelSelector, LeaseSeconds: leaseSeconds})
}

// drillCluster is the drill's four Nodes (a1, a2 played by kwok "a"; b1, b2 by kwok "b"), one
// Pod on each, all Ready.
type drillCluster struct {
	ns     string
	a, b   *testenv.Process
	groups map[string][]string
}

func newDrillCluster(t *testing.T, prefix string) *drillCluster {
	t.Helper()
	client := env.Client(t)
	ctx := context.Background()
	d := &drillCluster{ns: env.Namespace(t), groups: map[string][]string{}}
	for _, g := range []string{"a", "b"} {
		for i := 1; i <= 2; i++ {
			name := prefix + "-" + g + strconv.Itoa(i)
			d.groups[g] = append(d.groups[g], name)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				drillLabel: prefix, drillGroupLabel: prefix + "-" + g,
				corev1.LabelTopologyRegion: "r", corev1.LabelTopologyZone: "zone-" + prefix,
			}}}
			if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
				_ = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.Background(), name, metav1.DeleteOptions{})
			})
		}
	}
	d.a = startKwok(t, "kwok-"+prefix+"-a", drillGroupLabel+"="+prefix+"-a", drillLease)
	d.b = startKwok(t, "kwok-"+prefix+"-b", drillGroupLabel+"="+prefix+"-b", drillLease)
	// The Pods come once kwok plays their Nodes (it reports them Ready), so kwok sees them as
	// new Pods of Nodes it holds: created before, they depend on kwok re-listing a Node's Pods
	// when it takes the Node's Lease, and once (CI, 2026-11-26) they were not Ready 30 s later.
	waitNodes(t, client, slack, "kwok reporting the drill nodes Ready", isReady, d.nodes()...)
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range d.nodes() {
				if p, err := getPod(client, d.ns, "on-"+n); err == nil {
					t.Logf("pod on-%s: phase %s, conditions %+v", n, p.Status.Phase, p.Status.Conditions)
				}
			}
		}
	})
	for _, name := range d.nodes() {
		// kwok makes a Pod bound to a Node it plays Running and Ready. It tolerates the
		// unreachable NoExecute taint for ever: a Node handled as silent keeps its Pod,
		// not Ready, so that "not Ready" is a final state to wait for.
		pod := makePod(d.ns, "on-"+name, name, unreachableToleration(nil))
		if _, err := client.CoreV1().Pods(d.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func (d *drillCluster) nodes() []string {
	return append(append([]string{}, d.groups["a"]...), d.groups["b"]...)
}

// podsReady reports whether the Pods on the named Nodes all have Ready status want.
func (d *drillCluster) podsReady(t *testing.T, want corev1.ConditionStatus, nodes ...string) bool {
	t.Helper()
	for _, n := range nodes {
		p, err := getPod(env.Client(t), d.ns, "on-"+n)
		if err != nil || podReady(p) != want {
			return false
		}
	}
	return true
}

// freeze stops every kwok at once: no Lease of any drill Node is renewed any more.
func (d *drillCluster) freeze(t *testing.T) time.Time {
	t.Helper()
	for _, p := range []*testenv.Process{d.a, d.b} {
		if err := p.Freeze(); err != nil {
			t.Fatal(err)
		}
	}
	return time.Now()
}

// hasReadyTaint reports whether the Node has a taint of this controller for its Ready
// condition, NoSchedule or NoExecute.
func hasReadyTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady {
			return true
		}
	}
	return false
}

func isUnknown(n *corev1.Node) bool {
	r := readyOf(n)
	return r != nil && r.Status == corev1.ConditionUnknown
}

// Without the flag: upstream's behaviour. Every Node turns Unknown and every Pod is marked
// not Ready (NoExecute tainting stops: all zones are down, as upstream).
func TestPartitionDrillWithoutGuardMarksEveryPod(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	d := newDrillCluster(t, "upd")
	all := d.nodes()
	env.StartLeading(t, controller, "ctl", drillTimings...)
	waitNodes(t, client, slack, "the kwok nodes Ready and clean", isReadyClean, all...)
	waitFor(t, slack, "the kwok pods Ready", func() bool { return d.podsReady(t, corev1.ConditionTrue, all...) })

	stopped := d.freeze(t)
	waitFor(t, drillGrace+slack, "every pod marked not Ready", func() bool { return d.podsReady(t, corev1.ConditionFalse, all...) })
	t.Logf("every pod not Ready %s after the Leases stopped", time.Since(stopped).Round(time.Millisecond))
	waitNodes(t, client, slack, "every node Unknown with the unreachable NoSchedule taint", isUnreachable, all...)
}

// With --partition-unknown-fraction=0.5: all four Nodes falling silent together is taken for
// a partition. No Pod is marked not Ready and no Node is tainted; one Event, and the gauge at
// 1. Kwok "a" comes back: its Nodes are Ready and clean again; those of "b" stay held until a
// grace period after that return, and are then handled as silent Nodes (Pods not Ready,
// unreachable taint); the gauge goes back to 0.
// Over 80 lines: one drill read top to bottom; each step depends on the state the last left.
func TestPartitionDrillWithGuardHoldsThenResumesPerNode(t *testing.T) {
	requireEnv(t)
	began := time.Now()
	t.Cleanup(func() { t.Logf("drill ended %s after it began", time.Since(began).Round(time.Millisecond)) })
	client := env.Client(t)
	clearZoneEvents(t, client)
	d := newDrillCluster(t, "part")
	all := d.nodes()
	ctl := env.StartLeading(t, controller, "ctl", append(drillTimings, "--partition-unknown-fraction=0.5")...)
	waitNodes(t, client, slack, "the kwok nodes Ready and clean", isReadyClean, all...)
	waitFor(t, slack, "the kwok pods Ready", func() bool { return d.podsReady(t, corev1.ConditionTrue, all...) })
	if v := ctl.Metric("kcm_split_nodelifecycle_partition_suspected"); v != 0 {
		t.Fatalf("partition gauge before the drill = %v, want 0", v)
	}

	t.Logf("cluster ready %s after the drill began", time.Since(began).Round(time.Millisecond))
	stopped := d.freeze(t)
	waitFor(t, drillGrace+slack, "the partition gauge at 1", func() bool {
		return ctl.Metric("kcm_split_nodelifecycle_partition_suspected") == 1
	})
	t.Logf("partition suspected %s after the Leases stopped", time.Since(stopped).Round(time.Millisecond))
	waitNodes(t, client, slack, "every node Unknown", isUnknown, all...)
	// Well past the moment Pods would have been marked and taints added (the guard's window
	// and the NoExecute settle wait are each a few monitor periods at most).
	time.Sleep(drillGrace / 2)
	for _, name := range all {
		if n := getNode(t, client, name); hasReadyTaint(n) {
			t.Errorf("node %s was tainted during the suspected partition: %+v", name, n.Spec.Taints)
		}
	}
	if !d.podsReady(t, corev1.ConditionTrue, all...) {
		t.Error("a pod was marked not Ready during the suspected partition")
	}

	// Kwok "a" is back: its Leases renew, and it posts Ready again. The controller's grace
	// runs from when it sees the first renewal, its own clock, in no API object; back is read
	// before the thaw, so it is never later than that moment (read after, a loaded machine
	// could make it later by any amount) and the bounds below need no allowance.
	back := time.Now()
	if err := d.a.Thaw(); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, client, slack, "the nodes of kwok a Ready and clean", isReadyClean, d.groups["a"]...)
	t.Logf("kwok a's nodes Ready %s after their return", time.Since(back).Round(time.Millisecond))
	// The state first, then the clock: what was read was there before the time read.
	gauge := ctl.Metric("kcm_split_nodelifecycle_partition_suspected")
	bReady := d.podsReady(t, corev1.ConditionTrue, d.groups["b"]...)
	if time.Since(back) < drillGrace {
		// Still within the grace period after the first return: b is still held.
		if gauge != 1 {
			t.Errorf("partition gauge with b still silent = %v, want 1", gauge)
		}
		if !bReady {
			t.Error("a pod of b was marked not Ready within the grace period after a's return")
		}
	}

	// A grace period after the first return, b's Nodes are silent Nodes like any other.
	waitFor(t, drillGrace+slack, "the pods of b marked not Ready", func() bool {
		return d.podsReady(t, corev1.ConditionFalse, d.groups["b"]...)
	})
	released := time.Since(back)
	waitNodes(t, client, slack, "b's nodes with the unreachable NoSchedule taint", isUnreachable, d.groups["b"]...)
	waitFor(t, slack, "the partition gauge back at 0", func() bool {
		return ctl.Metric("kcm_split_nodelifecycle_partition_suspected") == 0
	})
	t.Logf("b's pods not Ready %s after a's return (grace %s); b tainted and the gauge at 0 %s after it",
		released.Round(time.Millisecond), drillGrace, time.Since(back).Round(time.Millisecond))
	if released < drillGrace {
		t.Errorf("b's pods were marked not Ready %s after a's return, within the grace period %s", released, drillGrace)
	}
	// a's Nodes and Pods were never touched.
	if !d.podsReady(t, corev1.ConditionTrue, d.groups["a"]...) {
		t.Error("a pod of a is not Ready")
	}
	for _, name := range d.groups["a"] {
		if n := getNode(t, client, name); !isReadyClean(n) {
			t.Errorf("node %s: %+v", name, n.Spec.Taints)
		}
	}
	// Counted only now, the episode over: one Event for all of it.
	evs := events(t, client, "default", corev1.NamespaceNodeLease)
	// More than half of the 4 Nodes: 3 or 4, as the last one may fall silent after the
	// verdict (it is then held at once).
	if got := countPrefix(evs, "PartitionSuspected: "); got != 1 {
		t.Errorf("events %q, want one PartitionSuspected", evs)
	}
}
