package nodelifecycle_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// One Node of three stops renewing its Lease: it turns Unknown with the unreachable taints,
// its Pods turn not Ready, the Pod without toleration is evicted at once, the one tolerating
// 10 s about 10 s later, the one tolerating for ever stays; the other Nodes, kept alive by
// their Leases alone, stay Ready. When the kubelet is back, the taints go and a Pod whose
// toleration had not run out yet is not evicted.
// Over 80 lines: one scenario read top to bottom; each step depends on the state the last left.
func TestSilentNodeIsTaintedAndItsPodsEvicted(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	ns := env.Namespace(t)
	k := newKubelets(t)
	nodes := []string{"silent-a", "silent-b", "silent-c"}
	for _, n := range nodes {
		k.addNode(n, "zone-silent")
	}
	ctl := env.StartLeading(t, controller, "ctl", shortTimings...)

	// TaintNodesByCondition put not-ready:NoSchedule on each new Node; Ready Nodes lose it.
	waitNodes(t, client, slack, "the admission not-ready taint lifted from Ready nodes", isReadyClean, nodes...)

	dead := "silent-b"
	createPod(t, client, makePod(ns, "none", dead))
	createPod(t, client, makePod(ns, "ten", dead, unreachableToleration(ptr[int64](10))))
	createPod(t, client, makePod(ns, "long", dead, unreachableToleration(ptr[int64](3600))))
	createPod(t, client, makePod(ns, "forever", dead, unreachableToleration(nil)))
	createPod(t, client, makePod(ns, "elsewhere", "silent-a"))

	// Leases alone keep Nodes healthy: no status was posted since creation, longer ago than
	// the grace period by the time this check passes.
	time.Sleep(grace + monitorPeriod)
	for _, n := range nodes {
		if r := readyOf(getNode(t, client, n)); r.Status != corev1.ConditionTrue {
			t.Fatalf("node %s renewing its lease is %s, want Ready", n, r.Status)
		}
	}

	k.stop(dead)
	waitNodes(t, client, grace+monitorPeriod+slack, "the silent node Unknown with the unreachable NoSchedule taint", isUnreachable, dead)
	n := getNode(t, client, dead)
	// Upstream stamps every taint it adds, the NoSchedule ones from conditions included.
	for _, tn := range n.Spec.Taints {
		if tn.Key == corev1.TaintNodeUnreachable && tn.Effect == corev1.TaintEffectNoSchedule && tn.TimeAdded == nil {
			t.Errorf("the unreachable NoSchedule taint has no timeAdded: %+v", tn)
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeNetworkUnavailable && (c.Status != corev1.ConditionUnknown || c.Message != "Kubelet stopped posting node status.") {
			t.Errorf("condition %s = %s (%q), want Unknown (Kubelet stopped posting node status.)", c.Type, c.Status, c.Message)
		}
	}
	waitNodes(t, client, monitorPeriod+slack, "the unreachable NoExecute taint", func(n *corev1.Node) bool {
		return hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
	}, dead)
	// The tolerations run from the taint's timeAdded, not from when this test saw it (up to
	// a poll and the machine's load later). timeAdded is whole seconds, up to 1 s before the
	// taint was added, and the eviction controller counts from its first sight of the taint,
	// later still: the reference can only be early, which makes an early eviction look up to
	// 1 s later than it was, never a right one earlier.
	tainted := taintAdded(t, getNode(t, client, dead), corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)

	for _, p := range []string{"ten", "long", "forever"} {
		waitFor(t, slack, "pod "+p+" not Ready", func() bool {
			pod, err := getPod(client, ns, p)
			return err == nil && podReady(pod) == corev1.ConditionFalse
		})
	}
	waitFor(t, slack, "the pod without toleration evicted", func() bool { return evicted(client, ns, "none") })
	// The state first, then the clock: an eviction seen was there before the time read.
	if ten := evicted(client, ns, "ten"); ten && time.Since(tainted) < 5*time.Second {
		t.Error("the pod tolerating 10 s was evicted within 5 s of the taint")
	}
	waitFor(t, 10*time.Second+slack, "the pod tolerating 10 s evicted", func() bool { return evicted(client, ns, "ten") })
	if d := time.Since(tainted); d < 10*time.Second {
		t.Errorf("the pod tolerating 10 s was evicted %s after the taint", d)
	}
	pod, err := getPod(client, ns, "none")
	if err == nil && !hasCondition(pod, corev1.DisruptionTarget, "DeletionByTaintManager") {
		t.Errorf("evicted pod conditions %+v, want DisruptionTarget DeletionByTaintManager", pod.Status.Conditions)
	}

	// The others on the dead Node stay; the Pod elsewhere stays Ready; the live Nodes stay
	// Ready and untainted.
	for _, p := range []string{"long", "forever"} {
		if evicted(client, ns, p) {
			t.Errorf("pod %s was evicted", p)
		}
	}
	if p, err := getPod(client, ns, "elsewhere"); err != nil || podReady(p) != corev1.ConditionTrue {
		t.Errorf("pod on a live node: %v, ready %s", err, podReady(p))
	}
	for _, n := range []string{"silent-a", "silent-c"} {
		if !isReadyClean(getNode(t, client, n)) {
			t.Errorf("live node %s is not Ready and clean: %+v", n, getNode(t, client, n).Spec.Taints)
		}
	}

	// One Event and one delete request per eviction.
	for _, p := range []string{"none", "ten"} {
		if got := countPrefix(events(t, client, ns, p), "TaintManagerEviction: Marking for deletion"); got != 1 {
			t.Errorf("pod %s has %d eviction events, want 1: %v", p, got, events(t, client, ns, p))
		}
		if got := podDeletes(t, ns, p); got != 1 {
			t.Errorf("pod %s was deleted %d times, want 1", p, got)
		}
	}

	// Back: the taints go, the scheduled eviction of "long" is cancelled.
	k.resume(dead)
	waitNodes(t, client, slack, "the recovered node Ready without taints", isReadyClean, dead)
	// At least one: "exactly one" would hold on the way to a duplicate too; the count is
	// checked once the metrics below have been read.
	waitFor(t, slack, "the cancelled eviction event", func() bool {
		return countPrefix(events(t, client, ns, "long"), "TaintManagerEviction: Cancelling deletion") >= 1
	})
	if evicted(client, ns, "long") {
		t.Error("pod long was evicted although the node came back in time")
	}
	if v := ctl.Metric(`node_collector_evictions_total{zone="r:` + "\x00:" + `zone-silent"}`); v != 1 {
		t.Errorf("node_collector_evictions_total = %v, want 1", v)
	}
	if v := ctl.Metric(`taint_eviction_controller_pod_deletions_total`); v != 2 {
		t.Errorf("taint_eviction_controller_pod_deletions_total = %v, want 2", v)
	}
	if got := countPrefix(events(t, client, ns, "long"), "TaintManagerEviction: Cancelling deletion"); got != 1 {
		t.Errorf("pod long has %d cancellation events, want 1", got)
	}
}

// taintAdded is the timeAdded of n's taint key:effect; the test fails if it has none.
func taintAdded(t *testing.T, n *corev1.Node, key string, effect corev1.TaintEffect) time.Time {
	t.Helper()
	for _, tn := range n.Spec.Taints {
		if tn.Key == key && tn.Effect == effect && tn.TimeAdded != nil {
			return tn.TimeAdded.Time
		}
	}
	t.Fatalf("node %s has no %s:%s taint with a timeAdded: %+v", n.Name, key, effect, n.Spec.Taints)
	return time.Time{}
}

func hasCondition(p *corev1.Pod, typ corev1.PodConditionType, reason string) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ && c.Reason == reason && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// A Node that never reported gets the startup grace period, not the normal one, and
// conditions saying it never reported.
func TestNeverReportedNodeGetsStartupGrace(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	k := newKubelets(t)
	env.StartLeading(t, controller, "ctl", shortTimings...)

	k.addNode("reported", "zone-startup")
	never := k.create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "never", Labels: map[string]string{
		corev1.LabelTopologyRegion: "r", corev1.LabelTopologyZone: "zone-startup"}}})
	// The startup grace runs from the Node's creationTimestamp, as the controller reads it:
	// whole seconds, up to 1 s before the Create. The controller counts from that same
	// truncated time, so the bounds below are the grace itself, with no allowance for the
	// truncation (the test's own clock after the Create was up to 1 s and a loaded
	// machine's delay later than it).
	created := never.CreationTimestamp.Time
	k.stop("reported")

	waitNodes(t, client, grace+monitorPeriod+slack, "the silent reported node Unknown", isUnreachable, "reported")
	// The state first, then the clock: a condition seen was there before the time read.
	if r := readyOf(getNode(t, client, "never")); r != nil && time.Since(created) < startupGrace {
		t.Fatalf("the never-reported node got Ready=%s within the startup grace period", r.Status)
	}
	waitNodes(t, client, startupGrace+slack, "the never-reported node Unknown", func(n *corev1.Node) bool {
		r := readyOf(n)
		return r != nil && r.Status == corev1.ConditionUnknown
	}, "never")
	if d := time.Since(created); d < startupGrace {
		t.Errorf("never-reported node marked after %s, before its startup grace %s", d, startupGrace)
	}
	for _, c := range getNode(t, client, "never").Status.Conditions {
		if c.Reason != "NodeStatusNeverUpdated" || c.Message != "Kubelet never posted node status." {
			t.Errorf("condition %s: reason %q message %q, want NodeStatusNeverUpdated", c.Type, c.Reason, c.Message)
		}
	}
}

func requireEnv(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("integration test: needs the real control plane (run without -short)")
	}
}

// In a zone of 10 Nodes, 6 failing together is a disruption, not 6 dead machines: the zone
// turns PartialDisruption, and being small (not above --large-cluster-size-threshold) it
// stops NoExecute tainting; an Event and a metric say so. The other zone is unaffected.
func TestPartialDisruptionPausesTainting(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	k := newKubelets(t)
	var zoneNodes []string
	for i := range 10 {
		name := fmt.Sprintf("partial-%d", i)
		zoneNodes = append(zoneNodes, name)
		k.addNode(name, "zone-p")
	}
	k.addNode("partial-other", "zone-q")
	clearZoneEvents(t, client)
	ctl := env.StartLeading(t, controller, "ctl", shortTimings...)
	waitNodes(t, client, slack, "all nodes Ready and clean", isReadyClean, append(zoneNodes, "partial-other")...)

	failing := zoneNodes[:6]
	k.stop(failing...)
	waitNodes(t, client, grace+monitorPeriod+slack, "the 6 silent nodes Unknown", isUnreachable, failing...)
	waitFor(t, slack, "the paused metric", func() bool {
		return ctl.Metric(`kcm_split_nodelifecycle_evictions_paused{reason="PartialDisruption",zone="r:`+"\x00:"+`zone-p"}`) == 1
	})
	// Well past the moment a taint would have come (the settle wait is one monitor period).
	time.Sleep(3 * monitorPeriod)
	for _, name := range failing {
		if n := getNode(t, client, name); hasNoExecute(n) {
			t.Errorf("node %s got a NoExecute taint in a partially disrupted small zone: %+v", name, n.Spec.Taints)
		}
	}
	if v := ctl.Metric(`node_collector_evictions_total{zone="r:` + "\x00:" + `zone-p"}`); v != 0 {
		t.Errorf("node_collector_evictions_total = %v, want 0", v)
	}
	if v := ctl.Metric(`node_collector_unhealthy_nodes_in_zone{zone="r:` + "\x00:" + `zone-p"}`); v != 6 {
		t.Errorf("node_collector_unhealthy_nodes_in_zone = %v, want 6", v)
	}
	if v := ctl.Metric(`node_collector_zone_size{zone="r:` + "\x00:" + `zone-p"}`); v != 10 {
		t.Errorf("node_collector_zone_size = %v, want 10", v)
	}
	if v := ctl.Metric(`kcm_split_nodelifecycle_zone_eviction_rate{zone="r:` + "\x00:" + `zone-q"}`); v != 0.1 {
		t.Errorf("healthy zone's rate = %v, want 0.1", v)
	}
	evs := events(t, client, "default", corev1.NamespaceNodeLease)
	if countPrefix(evs, "ZoneDisrupted: Zone r:zone-p is in PartialDisruption (6 of 10 Nodes not Ready): NoExecute tainting paused") != 1 {
		t.Errorf("zone events %q, want one ZoneDisrupted for zone-p", evs)
	}

	// Recovery: back to Normal, with an Event; the paused metric goes.
	for _, name := range failing {
		k.resume(name)
	}
	waitNodes(t, client, slack, "all nodes Ready and clean again", isReadyClean, zoneNodes...)
	// At least one, then exactly one after a sentinel wait: "exactly one" alone would hold on
	// the way to a duplicate too.
	waitFor(t, slack, "the ZoneNormal event", func() bool {
		return countPrefix(events(t, client, "default", corev1.NamespaceNodeLease), "ZoneNormal: Zone r:zone-p is Normal again") >= 1
	})
	if v := ctl.Metric(`kcm_split_nodelifecycle_evictions_paused{reason="PartialDisruption",zone="r:` + "\x00:" + `zone-p"}`); v != -1 {
		t.Errorf("paused metric still present after recovery: %v", v)
	}
	time.Sleep(2 * monitorPeriod)
	if got := countPrefix(events(t, client, "default", corev1.NamespaceNodeLease), "ZoneNormal: Zone r:zone-p is Normal again"); got != 1 {
		t.Errorf("%d ZoneNormal events for zone-p, want 1", got)
	}
}

// When no zone has a Ready Node, the controller assumes its own view is the problem: no
// NoExecute taints at all, an Event and a metric. When one Node is back, the others get a
// fresh grace period and only then are tainted, at the normal rate.
func TestAllZonesDownStopsTainting(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	k := newKubelets(t)
	nodes := []string{"down-a1", "down-a2", "down-b1", "down-b2"}
	for _, n := range nodes {
		k.addNode(n, "zone-"+n[5:6])
	}
	clearZoneEvents(t, client)
	ctl := env.StartLeading(t, controller, "ctl", shortTimings...)
	waitNodes(t, client, slack, "all nodes Ready and clean", isReadyClean, nodes...)

	k.stop(nodes...)
	waitNodes(t, client, grace+monitorPeriod+slack, "every node Unknown", isUnreachable, nodes...)
	waitFor(t, slack, "the AllZonesDown metric", func() bool {
		return ctl.Metric(`kcm_split_nodelifecycle_evictions_paused{reason="AllZonesDown",zone="r:`+"\x00:"+`zone-a"}`) == 1 &&
			ctl.Metric(`kcm_split_nodelifecycle_evictions_paused{reason="AllZonesDown",zone="r:`+"\x00:"+`zone-b"}`) == 1
	})
	time.Sleep(3 * monitorPeriod)
	for _, name := range nodes {
		if n := getNode(t, client, name); hasNoExecute(n) {
			t.Errorf("node %s got a NoExecute taint with all zones down: %+v", name, n.Spec.Taints)
		}
	}
	if evs := events(t, client, "default", corev1.NamespaceNodeLease); countPrefix(evs, "AllZonesDown: ") != 1 {
		t.Errorf("events %q, want one AllZonesDown", evs)
	}

	k.resume("down-a1")
	back := time.Now()
	waitNodes(t, client, slack, "the recovered node clean", isReadyClean, "down-a1")
	waitFor(t, slack, "the end of all-zones-down", func() bool {
		return countPrefix(events(t, client, "default", corev1.NamespaceNodeLease), "AllZonesDownEnded: ") >= 1
	})
	// Zone a is Normal (1 of 2 down), zone b fully down while a is healthy: both taint at the
	// normal rate, after the fresh grace period.
	waitNodes(t, client, grace+2*monitorPeriod+slack, "NoExecute taints on the nodes still down", hasNoExecute, "down-a2", "down-b1")
	if d := time.Since(back); d < grace {
		t.Errorf("nodes still down were tainted %s after the first node was back, within the fresh grace period %s", d, grace)
	}
	// Counted only now, after the wait above: "exactly one" would hold on the way to a
	// duplicate too.
	if got := countPrefix(events(t, client, "default", corev1.NamespaceNodeLease), "AllZonesDownEnded: "); got != 1 {
		t.Errorf("%d AllZonesDownEnded events, want 1", got)
	}
}

// Two replicas; the leader is stopped while a Node is failing. The standby finishes the
// work: the Pod tolerating a few seconds is evicted by it, and no Pod is deleted twice.
func TestHandoverMidFailure(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	ns := env.Namespace(t)
	k := newKubelets(t)
	for _, n := range []string{"ho-a", "ho-b", "ho-c"} {
		k.addNode(n, "zone-ho")
	}
	a := env.StartLeading(t, controller, "a", shortTimings...)
	b := env.Start(t, controller, "b", shortTimings...)
	waitNodes(t, client, slack, "all nodes clean", isReadyClean, "ho-a", "ho-b", "ho-c")
	createPod(t, client, makePod(ns, "none", "ho-b"))
	createPod(t, client, makePod(ns, "short", "ho-b", unreachableToleration(ptr[int64](6))))

	k.stop("ho-b")
	waitNodes(t, client, grace+2*monitorPeriod+slack, "the NoExecute taint", hasNoExecute, "ho-b")
	waitFor(t, slack, "the pod without toleration evicted", func() bool { return evicted(client, ns, "none") })
	if evicted(client, ns, "short") {
		t.Fatal("the pod tolerating 6 s went at once")
	}
	if !a.Stop(30 * time.Second) {
		t.Fatal("the leader did not stop on SIGTERM")
	}
	// The wait below is satisfied by whoever deletes the Pod: it shows the standby's work only
	// if the old leader, now gone, left the Pod in place.
	if evicted(client, ns, "short") {
		t.Fatal("the old leader evicted the pod tolerating 6 s before it stopped: nothing was left for the standby")
	}
	b.WaitLeadingAndSynced(controller.Lease(), time.Minute)
	waitFor(t, 6*time.Second+slack, "the standby evicting the pod tolerating 6 s", func() bool { return evicted(client, ns, "short") })
	time.Sleep(2 * monitorPeriod)
	for _, p := range []string{"none", "short"} {
		if got := podDeletes(t, ns, p); got != 1 {
			t.Errorf("pod %s deleted %d times, want 1", p, got)
		}
		if got := countPrefix(events(t, client, ns, p), "TaintManagerEviction: Marking for deletion"); got != 1 {
			t.Errorf("pod %s has %d eviction events, want 1", p, got)
		}
	}
	// The standby kept the taint rather than lifting and re-adding it.
	if n := getNode(t, client, "ho-b"); !hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
		t.Errorf("taints after handover: %+v", n.Spec.Taints)
	}
}

// A Node as registration leaves it (the TaintNodesByCondition admission's not-ready
// NoSchedule taint, stable os/arch labels without their beta twins) is brought in line by a
// single write of the controller: one patch per Node instead of two halves what a controller
// starting over a whole cluster spends of its client budget (issue 22).
func TestRegisteredNodeBroughtInLineInOneWrite(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	k := newKubelets(t)
	name := "fresh-a"
	k.addNode(name, "zone-fresh")
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"linux",%q:"arm64"}}}`, corev1.LabelOSStable, corev1.LabelArchStable)
	n, err := client.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasTaint(n, corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule) {
		t.Fatalf("the new node has no admission not-ready taint: %v", n.Spec.Taints)
	}
	w, err := client.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{
		FieldSelector: "metadata.name=" + name, ResourceVersion: n.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	env.StartLeading(t, controller, "ctl", shortTimings...)
	inLine := func(n *corev1.Node) bool {
		return isReadyClean(n) && n.Labels["beta.kubernetes.io/os"] == "linux" && n.Labels["beta.kubernetes.io/arch"] == "arm64"
	}
	waitNodes(t, client, slack, "the taint lifted and the beta labels set", inLine, name)

	// Count the writes that changed taints or labels, up to the one that brought it in line.
	writes, prev := 0, n
	timeout := time.After(slack)
	for !inLine(prev) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			cur, ok := ev.Object.(*corev1.Node)
			if !ok {
				t.Fatalf("watch event %s: %T", ev.Type, ev.Object)
			}
			if !maps.Equal(cur.Labels, prev.Labels) || !equality.Semantic.DeepEqual(cur.Spec.Taints, prev.Spec.Taints) {
				writes++
			}
			prev = cur
		case <-timeout:
			t.Fatal("the watch never showed the node in line")
		}
	}
	if writes != 1 {
		t.Errorf("the node was brought in line by %d writes of taints or labels, want 1", writes)
	}
}
