package nodelifecycle_test

// Handover drills (issue 49): state is built up under leader a, a is killed with SIGKILL (no
// release, no drain), b takes the Lease over once it expires, and b must go on as a would
// have. What b starts from is in the ConfigMap <Lease>-state beside the Lease.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/nodelifecycle"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// handoverArgs are a short Lease of its own for the drill, and the drill's timings.
func handoverArgs(t *testing.T, lease string, flags ...string) []string {
	t.Helper()
	testenv.DeleteKeptOnCleanup(t, env.Client(t), lease+nodelifecycle.StateStoreSuffix)
	args := append([]string{"--leader-elect-resource-name=" + lease}, testenv.ShortLeaseFlags()...)
	return append(append(args, shortTimings...), flags...)
}

// takeOver kills a and starts b with args, returning once b leads with synced caches.
func takeOver(t *testing.T, a *testenv.Controller, lease string, args []string) *testenv.Controller {
	t.Helper()
	killed := time.Now()
	a.Kill()
	b := env.Start(t, controller, "b", args...)
	b.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	t.Logf("b leads %s after a's SIGKILL", time.Since(killed).Round(time.Millisecond))
	return b
}

// setPodReady makes the Pod Ready again, as its kubelet would report it.
func setPodReady(t *testing.T, ns, name string) {
	t.Helper()
	client := env.Client(t)
	err := retryConflict(func() error {
		p, err := getPod(client, ns, name)
		if err != nil {
			return err
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		_, err = client.CoreV1().Pods(ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPartitionReleaseHandoverDrill: with --partition-unknown-fraction=0.5, four Nodes
// fall silent together and are held; one returns, and a grace period later the three still
// silent are released (their Pods marked not Ready, as upstream). a is killed. b marks a
// released Node's Pod not Ready again at once (it was set Ready meanwhile), records no new
// PartitionSuspected and holds nothing. Before issue 49, b found the three Unknown Nodes
// silent together at its first round: a new episode held them, and with none of them ever
// returning, for good.
func TestPartitionReleaseHandoverDrill(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	clearZoneEvents(t, client)
	const lease = "nodelifecycle-handover-partition"
	args := handoverArgs(t, lease, "--partition-unknown-fraction=0.5")
	k := newKubelets(t)
	ns := env.Namespace(t)
	names := []string{"hp-1", "hp-2", "hp-3", "hp-4"}
	for _, n := range names {
		k.addNode(n, "zone-hp")
		createPod(t, client, makePod(ns, "on-"+n, n, unreachableToleration(nil)))
	}
	a := env.Start(t, controller, "a", args...)
	a.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	waitNodes(t, client, slack, "the nodes Ready and clean", isReadyClean, names...)

	k.stop(names...)
	waitFor(t, grace+slack, "a's partition gauge at 1", func() bool { return a.Metric("kcm_split_nodelifecycle_partition_suspected") == 1 })
	waitNodes(t, client, slack, "every node Unknown", isUnknown, names...)
	k.resume(names[0])
	back := time.Now()
	silent := names[1:]
	waitFor(t, grace+slack, "the silent nodes' pods marked not Ready", func() bool {
		for _, n := range silent {
			if p, err := getPod(client, ns, "on-"+n); err != nil || podReady(p) != corev1.ConditionFalse {
				return false
			}
		}
		return true
	})
	t.Logf("silent nodes released %s after the first one returned", time.Since(back).Round(time.Millisecond))
	waitFor(t, slack, "a's partition gauge back at 0", func() bool { return a.Metric("kcm_split_nodelifecycle_partition_suspected") == 0 })
	// The release is written for the next leader.
	waitFor(t, slack, "the release kept beside the Lease", func() bool {
		cm, err := client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), lease+nodelifecycle.StateStoreSuffix, metav1.GetOptions{})
		if err != nil {
			return false
		}
		var kept struct {
			Partition struct {
				Nodes map[string]struct {
					State string `json:"state"`
				} `json:"nodes"`
			} `json:"partition"`
		}
		if json.Unmarshal([]byte(cm.Data[nodelifecycle.StateStoreKey]), &kept) != nil {
			return false
		}
		for _, n := range silent {
			if kept.Partition.Nodes[n].State != "released" {
				return false
			}
		}
		return true
	})

	b := takeOver(t, a, lease, args)
	// A released Node's Pod reported Ready again: b marks it not Ready, as a did every round.
	setPodReady(t, ns, "on-"+silent[0])
	marked := time.Now()
	waitFor(t, 2*grace+slack/3, "b marking the released node's pod not Ready", func() bool {
		p, err := getPod(client, ns, "on-"+silent[0])
		return err == nil && podReady(p) == corev1.ConditionFalse
	})
	t.Logf("b marked it not Ready %s after it was set Ready", time.Since(marked).Round(time.Millisecond))
	// Well past b's first rounds and a window: no new episode.
	time.Sleep(2 * monitorPeriod)
	if v := b.Metric("kcm_split_nodelifecycle_partition_suspected"); v != 0 {
		t.Errorf("b's partition gauge = %v, want 0: the released nodes held again", v)
	}
	if got := countPrefix(events(t, client, "default", corev1.NamespaceNodeLease), nodelifecycle.ReasonPartitionSuspected+": "); got != 1 {
		t.Errorf("%d PartitionSuspected events, want the one of a's episode", got)
	}
	if v := b.Metric(`kcm_split_nodelifecycle_state_operations_total{op="read",result="ok"}`); v != 1 {
		t.Errorf("b's reads of the kept state = %v, want 1", v)
	}
}

// TestEvictionPaceHandoverDrill: with --keep-eviction-pace and a rate of one Node per 25 s,
// two Nodes of a zone of three stop. a taints the first NoExecute; the second waits for the
// rate. a is killed; b taints the second no sooner than 25 s after the first, as a would
// have. Before issue 49 (and without the flag, upstream's behaviour), b started the zone with
// a token and tainted the second as soon as its own grace period had passed, about 10 s after
// the first.
func TestEvictionPaceHandoverDrill(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	const (
		lease    = "nodelifecycle-handover-pace"
		interval = 25 * time.Second
	)
	args := handoverArgs(t, lease, "--keep-eviction-pace", fmt.Sprintf("--node-eviction-rate=%g", 1/interval.Seconds()))
	k := newKubelets(t)
	names := []string{"pace-1", "pace-2", "pace-3"}
	for _, n := range names {
		k.addNode(n, "zone-pace")
	}
	a := env.Start(t, controller, "a", args...)
	a.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	waitNodes(t, client, slack, "the nodes Ready and clean", isReadyClean, names...)

	dead := names[1:]
	k.stop(dead...)
	var first string
	waitFor(t, grace+slack, "a's first NoExecute taint", func() bool {
		for _, n := range dead {
			if hasTaint(getNode(t, client, n), corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
				first = n
				return true
			}
		}
		return false
	})
	// a writes it for the next leader (at most a second later), then dies.
	time.Sleep(2 * time.Second)
	second := dead[0]
	if second == first {
		second = dead[1]
	}
	if hasNoExecute(getNode(t, client, second)) {
		t.Fatalf("a tainted both within the interval")
	}
	takeOver(t, a, lease, args)
	waitNodes(t, client, interval+slack, "b's NoExecute taint of the second node", func(n *corev1.Node) bool {
		return hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
	}, second)
	added := func(name string) time.Time {
		for _, tn := range getNode(t, client, name).Spec.Taints {
			if tn.Key == corev1.TaintNodeUnreachable && tn.Effect == corev1.TaintEffectNoExecute && tn.TimeAdded != nil {
				return tn.TimeAdded.Time
			}
		}
		t.Fatalf("node %s: no timeAdded on its NoExecute taint", name)
		return time.Time{}
	}
	gap := added(second).Sub(added(first))
	t.Logf("NoExecute taints %s apart across the handover (interval %s)", gap, interval)
	// timeAdded has a resolution of one second.
	if gap < interval-time.Second {
		t.Errorf("second node tainted %s after the first, sooner than the zone's interval %s", gap, interval)
	}
}

// TestSignsOfLifeHandoverDrill: with --keep-signs-of-life and a grace period of 10 s, a
// Node stops renewing its Lease; 3 s later a is killed. b marks the Node Unknown about 10 s
// after its last renewal, as a would have, not a full grace period after b's own start
// (upstream's new leader, and this one before issue 49: about 17 s).
func TestSignsOfLifeHandoverDrill(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	const (
		lease      = "nodelifecycle-handover-signs"
		longGrace  = 10 * time.Second
		killedLate = 3 * time.Second
	)
	args := append(handoverArgs(t, lease, "--keep-signs-of-life"), "--node-monitor-grace-period="+longGrace.String())
	k := newKubelets(t)
	names := []string{"signs-1", "signs-2", "signs-3"}
	for _, n := range names {
		k.addNode(n, "zone-signs")
	}
	a := env.Start(t, controller, "a", args...)
	a.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	waitNodes(t, client, slack, "the nodes Ready and clean", isReadyClean, names...)

	k.stop(names[0])
	stopped := time.Now()
	time.Sleep(killedLate)
	b := takeOver(t, a, lease, args)
	waitNodes(t, client, longGrace+slack, "the silent node Unknown", isUnknown, names[0])
	took := time.Since(stopped)
	marked := readyOf(getNode(t, client, names[0])).LastTransitionTime.Time
	held := env.LeaseHolder(t, "kube-system", lease)
	if held.Holder != b.Identity() {
		t.Fatalf("Lease held by %q, not b (%s)", held.Holder, b.Identity())
	}
	t.Logf("silent node Unknown %s after its last renewal, %s after b acquired the Lease (grace %s, a killed %s after the renewal)",
		took.Round(time.Millisecond), marked.Sub(held.AcquireTime).Round(time.Millisecond), longGrace, killedLate)
	// b's informers start once it holds the Lease: judging the Node afresh, b would see it
	// first after acquireTime and mark it Unknown a full grace period after that at the
	// earliest. Both times are b's clock; lastTransitionTime keeps whole seconds (cut down),
	// hence the second added. Kept signs of life put it about 7 s earlier than that (a's
	// Lease had to expire first); load could fail this only by holding b's sync and first
	// round back for 9 s after it acquired.
	if !marked.Add(time.Second).Before(held.AcquireTime.Add(longGrace)) {
		t.Errorf("marked Unknown at %s, a full grace period %s after b acquired the Lease at %s: from b's start, not from the node's silence",
			marked.Format(time.RFC3339), longGrace, held.AcquireTime.Format(time.RFC3339Nano))
	}
	for _, n := range names[1:] {
		if !isReady(getNode(t, client, n)) {
			t.Errorf("healthy node %s not Ready", n)
		}
	}
}
