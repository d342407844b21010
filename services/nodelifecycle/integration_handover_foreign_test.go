package nodelifecycle_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestForeignWriterEpisodeHandover (issue 49): kube-controller-manager's node lifecycle
// controller still at it across a handover is one episode. It toggles the unreachable
// NoSchedule taint of a Ready Node every second (this controller takes it off again between
// its writes); leader a reports it once and keeps the episode in <Lease name>-foreign-writers.
// a is killed with SIGKILL and b takes the Lease over while the writes go on; once b has seen
// them (a kubectl write of another Node's taints after them is reported, so every earlier one
// has been looked at), the tainted Node still has one Event and b counted no episode of
// kube-controller-manager. Before the episode was kept, b reported it again: a second Event
// on that Node, b's counter at 2.
//
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestForeignWriterEpisodeHandover(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	ctx := context.Background()
	const (
		lease  = "nodelifecycle-handover-foreign"
		prefix = "hf"
	)
	store := lease + foreign.EpisodesSuffix
	testenv.DeleteKeptOnCleanup(t, client, store)
	args := handoverArgs(t, lease)
	k := newKubelets(t)
	nodes := []string{prefix + "-a", prefix + "-b", prefix + "-c"}
	for _, n := range nodes {
		k.addNode(n, "zone-"+prefix)
	}
	a := env.Start(t, controller, "a", args...)
	a.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	waitNodes(t, client, slack, "the nodes Ready and clean", isReadyClean, nodes...)
	// Events of these Nodes only, not of the same names in an earlier run (-count).
	uids := map[types.UID]string{}
	for _, n := range nodes {
		uids[getNode(t, client, n).UID] = n
	}
	nodeEvents := func() (byNode map[string][]string) {
		byNode = map[string][]string{}
		for _, e := range foreignEvents(t, client, prefix) {
			if n, ok := uids[e.InvolvedObject.UID]; ok {
				byNode[n] = append(byNode[n], e.Message)
			}
		}
		return byNode
	}

	// toggle adds the taint when the Node lacks it, else removes it: every write changes
	// this controller's taints, as manager.
	toggle := func(node, manager, key string) error {
		return retryConflict(func() error {
			n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			kept := n.Spec.Taints[:0]
			for _, tn := range n.Spec.Taints {
				if tn.Key != key || tn.Effect != corev1.TaintEffectNoSchedule {
					kept = append(kept, tn)
				}
			}
			if len(kept) == len(n.Spec.Taints) {
				kept = append(kept, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
			}
			n.Spec.Taints = kept
			_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: manager})
			return err
		})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	wg.Go(func() {
		for i := 0; ; i++ {
			if err := toggle(nodes[0], kcm, corev1.TaintNodeUnreachable); err != nil {
				t.Errorf("kube-controller-manager's write %d: %v", i, err)
				return
			}
			writes.Add(1)
			select {
			case <-stop:
				return
			case <-time.After(1100 * time.Millisecond): // managedFields times have whole seconds
			}
		}
	})
	stopWriting := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopWriting)

	waitFor(t, slack, "a's report of kube-controller-manager", func() bool {
		return len(nodeEvents()[nodes[0]]) > 0 && a.Metric(foreignCounter) == 1
	})
	keptIn(t, store, `"manager":"`+kcm+`"`)

	// The leader crashes: SIGKILL, no drain, no release of its Lease. The writes go on.
	b := takeOver(t, a, lease, args)
	writesBefore := writes.Load()
	waitFor(t, slack, "three more writes of kube-controller-manager with b leading", func() bool {
		return writes.Load() >= writesBefore+3
	})
	stopWriting()

	// A sentinel: once its Event is there, b has looked at every earlier write.
	if err := toggle(nodes[1], "kubectl-taint", corev1.TaintNodeMemoryPressure); err != nil {
		t.Fatalf("sentinel write: %v", err)
	}
	var byNode map[string][]string
	waitFor(t, slack, "b's report of the sentinel", func() bool {
		byNode = nodeEvents()
		return len(byNode[nodes[1]]) > 0 && b.Metric(foreignCounter) >= 1
	})
	if evs := byNode[nodes[0]]; len(evs) != 1 || !strings.Contains(evs[0], `"`+kcm+`"`) {
		t.Errorf("%d Events on %s for kube-controller-manager's one episode across the handover, want 1: %q", len(evs), nodes[0], evs)
	}
	if got := b.Metric(foreignCounter); got != 1 {
		t.Errorf("b's %s = %v, want 1 (the sentinel's episode only: kube-controller-manager's was a's)", foreignCounter, got)
	}
	t.Logf("kube-controller-manager wrote %d times, %d of them with b leading", writes.Load(), writes.Load()-writesBefore)
}

// keptIn waits for the ConfigMap name in kube-system to hold want in its episodes.
func keptIn(t *testing.T, name, want string) {
	t.Helper()
	client := env.Client(t)
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("last seen in %s: %q", name, last)
		}
	}()
	waitFor(t, slack, name+" to keep "+want, func() bool {
		cm, err := client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			last = cm.Data[foreign.EpisodesKey]
		}
		return strings.Contains(last, want)
	})
}
