package nodelifecycle_test

// Node IPAM against the real apiserver: the shipped binary with --allocate-node-cidrs. The
// apiserver is the judge of "written once": it refuses any change of spec.podCIDRs once set.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ipamNodes creates and, at the end of the test, deletes bare Nodes (no kubelet: IPAM needs
// none). It starts from a cluster with no Node, so that no other test's Node takes a range.
type ipamNodes struct {
	t      *testing.T
	client kubernetes.Interface
}

func newIPAMNodes(t *testing.T) *ipamNodes {
	t.Helper()
	requireEnv(t)
	n := &ipamNodes{t: t, client: env.Client(t)}
	ctx := context.Background()
	if err := n.client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, slack, "no Node left from earlier tests", func() bool {
		list, err := n.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})
	t.Cleanup(func() {
		_ = n.client.CoreV1().Nodes().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	return n
}

func (n *ipamNodes) create(name string, podCIDRs ...string) {
	n.t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if len(podCIDRs) > 0 {
		node.Spec.PodCIDR, node.Spec.PodCIDRs = podCIDRs[0], podCIDRs
	}
	if _, err := n.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		n.t.Fatalf("creating Node %s: %v", name, err)
	}
}

func (n *ipamNodes) delete(name string) {
	n.t.Helper()
	if err := n.client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		n.t.Fatalf("deleting Node %s: %v", name, err)
	}
}

// ranges is each Node's spec.podCIDRs, checked to agree with spec.podCIDR.
func (n *ipamNodes) ranges() map[string][]string {
	n.t.Helper()
	list, err := n.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, node := range list.Items {
		out[node.Name] = node.Spec.PodCIDRs
		if len(node.Spec.PodCIDRs) > 0 && node.Spec.PodCIDR != node.Spec.PodCIDRs[0] {
			n.t.Errorf("Node %s: podCIDR %s is not podCIDRs[0] of %v", node.Name, node.Spec.PodCIDR, node.Spec.PodCIDRs)
		}
	}
	return out
}

// waitRanges waits until every named Node has want ranges (one per family).
func (n *ipamNodes) waitRanges(want int, names ...string) map[string][]string {
	n.t.Helper()
	var got map[string][]string
	waitFor(n.t, slack, fmt.Sprintf("Pod ranges on %v", names), func() bool {
		got = n.ranges()
		for _, name := range names {
			if len(got[name]) != want {
				return false
			}
		}
		return true
	})
	return got
}

func TestIPAMDualStackRangesAreDistinctAndSurviveARestart(t *testing.T) {
	nodes := newIPAMNodes(t)
	cluster4, cluster6 := netip.MustParsePrefix("10.240.0.0/20"), netip.MustParsePrefix("fd00:240::/56")
	service := netip.MustParsePrefix("10.240.0.0/24")
	args := []string{"--allocate-node-cidrs", "--cluster-cidr=10.240.0.0/20,fd00:240::/56",
		"--node-cidr-mask-size-ipv4=26", "--node-cidr-mask-size-ipv6=64", "--service-cluster-ip-range=" + service.String()}
	// A Node registered with its ranges before the controller runs keeps them.
	preset := []string{"10.240.1.0/26", "fd00:240:0:10::/64"}
	nodes.create("ipam-preset", preset...)

	ctl := env.StartLeading(t, controller, "ipam-1", args...)
	const count = 30
	var names []string
	var wg sync.WaitGroup
	for i := range count {
		name := fmt.Sprintf("ipam-%02d", i)
		names = append(names, name)
		wg.Go(func() { nodes.create(name) })
	}
	wg.Wait()
	got := nodes.waitRanges(2, names...)
	if !slices.Equal(got["ipam-preset"], preset) {
		t.Fatalf("preset Node's ranges became %v", got["ipam-preset"])
	}
	checkDistinct(t, got, cluster4, cluster6, service)
	if v := ctl.Metric(`node_ipam_controller_cidrset_cidrs_allocations_total{clusterCIDR="fd00:240::/56"}`); v != count+1 {
		t.Errorf("IPv6 allocations %v, want %d (one per new Node, and the preset one)", v, count+1)
	}

	// A restart (a new leader) accounts for every range before handing one out: no Node's
	// range changes, and Nodes that registered while no controller ran get ranges nobody
	// has, although the queue reaches them before the preset Node (names sort first).
	if !ctl.Stop(30 * time.Second) {
		t.Fatal("controller did not stop")
	}
	var later []string
	for i := range 5 {
		later = append(later, fmt.Sprintf("ipam-after-%d", i))
		nodes.create(later[i])
	}
	env.StartLeading(t, controller, "ipam-2", args...)
	after := nodes.waitRanges(2, later...)
	for name, r := range got {
		if !slices.Equal(after[name], r) {
			t.Errorf("Node %s: ranges %v became %v across a restart", name, r, after[name])
		}
	}
	checkDistinct(t, after, cluster4, cluster6, service)
}

// checkDistinct checks that every Node has an IPv4 range then an IPv6 one, inside the cluster
// CIDRs, none overlapping another Node's or the Service range.
func checkDistinct(t *testing.T, ranges map[string][]string, cluster4, cluster6, service netip.Prefix) {
	t.Helper()
	owner := map[netip.Prefix]string{}
	for name, rs := range ranges {
		if len(rs) != 2 {
			t.Errorf("Node %s has ranges %v, want one per family", name, rs)
			continue
		}
		for i, s := range rs {
			p := netip.MustParsePrefix(s)
			cluster := []netip.Prefix{cluster4, cluster6}[i]
			if !cluster.Contains(p.Addr()) || p.Bits() < cluster.Bits() {
				t.Errorf("Node %s: %s is outside %s", name, p, cluster)
			}
			if p.Overlaps(service) {
				t.Errorf("Node %s: %s overlaps the Service range %s", name, p, service)
			}
			for q, other := range owner {
				if q.Overlaps(p) {
					t.Errorf("Nodes %s and %s have overlapping ranges %s and %s", name, other, p, q)
				}
			}
			owner[p] = name
		}
	}
}

func TestIPAMExhaustedNodeWaitsWithAnEventUntilARangeIsFreed(t *testing.T) {
	nodes := newIPAMNodes(t)
	c := env.Client(t)
	// A /30 cut into /31s: two ranges. One is preset on a Node before the controller starts;
	// another Node has a range outside the cluster CIDR.
	nodes.create("ipam-held", "192.0.2.2/31")
	nodes.create("ipam-stray", "198.51.100.0/31")
	ctl := env.StartLeading(t, controller, "ipam", "--allocate-node-cidrs", "--cluster-cidr=192.0.2.0/30", "--node-cidr-mask-size=31")

	nodes.create("ipam-first")
	if got := nodes.waitRanges(1, "ipam-first")["ipam-first"]; !slices.Equal(got, []string{"192.0.2.0/31"}) {
		t.Fatalf("first Node got %v; the only free range is 192.0.2.0/31", got)
	}
	nodes.create("ipam-waiting")
	waitFor(t, slack, "a CIDRNotAvailable Event on the third Node", func() bool {
		return countPrefix(events(t, c, "default", "ipam-waiting"), "CIDRNotAvailable: ") > 0
	})
	waitFor(t, slack, "the waiting-Nodes gauge at 1", func() bool {
		return ctl.Metric("kcm_split_nodelifecycle_nodes_waiting_for_cidr") == 1
	})
	if got := nodes.ranges()["ipam-waiting"]; len(got) != 0 {
		t.Fatalf("third Node got %v from a space of two", got)
	}
	if got := nodes.ranges()["ipam-held"]; !slices.Equal(got, []string{"192.0.2.2/31"}) {
		t.Fatalf("preset Node's range became %v", got)
	}
	// The stray range: an Event, no rewrite.
	waitFor(t, slack, "a CIDROutOfRange Event on the Node with a range outside the cluster CIDR", func() bool {
		return countPrefix(events(t, c, "default", "ipam-stray"), "CIDROutOfRange: ") > 0
	})
	if got := nodes.ranges()["ipam-stray"]; !slices.Equal(got, []string{"198.51.100.0/31"}) {
		t.Fatalf("the stray Node's range became %v", got)
	}

	// Deleting the preset Node frees its range: the waiting Node gets it, with no further
	// Event and no backoff to sit out.
	nodes.delete("ipam-held")
	if got := nodes.waitRanges(1, "ipam-waiting")["ipam-waiting"]; !slices.Equal(got, []string{"192.0.2.2/31"}) {
		t.Fatalf("waiting Node got %v, want the freed 192.0.2.2/31", got)
	}
	if n := countPrefix(events(t, c, "default", "ipam-waiting"), "CIDRNotAvailable: "); n != 1 {
		t.Errorf("%d CIDRNotAvailable Events, want 1", n)
	}
	if v := ctl.Metric(`node_ipam_controller_cidrset_usage_cidrs{clusterCIDR="192.0.2.0/30"}`); v != 1 {
		t.Errorf("usage %v, want 1", v)
	}
	if v := ctl.Metric(`node_ipam_controller_cidrset_cidrs_releases_total{clusterCIDR="192.0.2.0/30"}`); v != 1 {
		t.Errorf("releases %v, want 1", v)
	}
}
