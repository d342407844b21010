package nodelifecycle_test

// Node IPAM against the real apiserver: the shipped binary with --allocate-node-cidrs. The
// apiserver is the judge of "written once": it refuses any change of spec.podCIDRs once set.

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/services/nodelifecycle/ipam"
	"github.com/kcm-split/kcm-split/shared/testenv"
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
	clearZoneEvents(t, c)
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
	if v := ctl.Metric(`kcm_split_nodelifecycle_cidr_free_ranges{clusterCIDR="192.0.2.0/30"}`); v != 0 {
		t.Errorf("free ranges %v, want 0", v)
	}
	// Fewer free ranges than the default warning threshold (10) from the start (1 of 2 once
	// the preset range was accounted for), then none: one Event for the whole shortage,
	// counted only now that the shortage has run its course.
	low := "CIDRRangesRunningLow: Only 1 of the 2 Pod ranges (/31) of cluster CIDR 192.0.2.0/30 are free"
	if n := countPrefix(events(t, c, "default", corev1.NamespaceNodeLease), "CIDRRangesRunningLow: "); n != 1 ||
		countPrefix(events(t, c, "default", corev1.NamespaceNodeLease), low) != 1 {
		t.Errorf("running-low Events %q, want one %q", events(t, c, "default", corev1.NamespaceNodeLease), low)
	}
}

// TestIPAMSplitBrainNeverHandsOutARangeTwice runs two allocators at once, both with
// --leader-elect=false on the same cluster CIDR (a split brain), while 200 Nodes register and
// 40 of them are deleted and registered again under the same names. Each range is claimed
// (an IPAddress) before it is written, and each write is conditioned on the Node's
// resourceVersion: no two live Nodes may end with overlapping ranges, each Node is written a
// bounded number of times, and the claims end as exactly one per live Node.
// Over 80 lines: one drill read top to bottom; its phases share the cluster and both processes.
func TestIPAMSplitBrainNeverHandsOutARangeTwice(t *testing.T) {
	nodes := newIPAMNodes(t)
	ctx := context.Background()
	cluster := netip.MustParsePrefix("10.250.0.0/15")
	args := []string{"--leader-elect=false", "--allocate-node-cidrs", "--cluster-cidr=" + cluster.String(), "--node-cidr-mask-size=24",
		// No kubelets here: keep the lifecycle half of the binary from writing to the Nodes.
		"--node-startup-grace-period=10m"}
	var ctls []*testenv.Controller
	for _, name := range []string{"ipam-a", "ipam-b"} {
		ctl := env.Start(t, controller, name, args...)
		ctls = append(ctls, ctl)
	}
	for _, ctl := range ctls {
		waitFor(t, time.Minute, ctl.Name+" to allocate", func() bool {
			code, _ := ctl.Get("/readyz")
			return code == http.StatusOK &&
				ctl.Metric(`node_ipam_controller_cirdset_max_cidrs{clusterCIDR="`+cluster.String()+`"}`) == 512
		})
	}

	const count, churn = 200, 40
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("split-%03d", i)
	}
	create := func(list []string) {
		var wg sync.WaitGroup
		next := make(chan string)
		for range 16 {
			wg.Go(func() {
				for name := range next {
					if _, err := nodes.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
						t.Errorf("creating Node %s: %v", name, err)
					}
				}
			})
		}
		for _, n := range list {
			next <- n
		}
		close(next)
		wg.Wait()
	}
	create(names)
	// Churn: every fifth Node is deleted, some before and some after getting a range, and
	// registered again under the same name (a new UID).
	var churned []string
	for i := 0; i < count; i += count / churn {
		churned = append(churned, names[i])
	}
	for _, name := range churned {
		nodes.delete(name)
	}
	waitFor(t, slack, "the churned Nodes to be gone", func() bool {
		for _, name := range churned {
			if _, err := nodes.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	})
	create(churned)

	got := nodes.waitRanges(1, names...)
	owner := map[netip.Prefix]string{}
	for name, rs := range got {
		p := netip.MustParsePrefix(rs[0])
		if !cluster.Contains(p.Addr()) || p.Bits() != 24 {
			t.Errorf("Node %s: %s is not a /24 of %s", name, p, cluster)
		}
		for q, other := range owner {
			if q.Overlaps(p) {
				t.Errorf("Nodes %s and %s have overlapping ranges %s and %s", name, other, p, q)
			}
		}
		owner[p] = name
	}

	// The claims settle to one per live Node, naming it, its UID and its range: those of the
	// deleted Node objects and those lost in races are released.
	live, err := nodes.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var claims []networkingv1.IPAddress
	waitFor(t, slack, "one claim per live Node", func() bool {
		list, err := nodes.client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{LabelSelector: ipam.ClaimSelector()})
		if err != nil {
			return false
		}
		claims = slices.DeleteFunc(list.Items, func(ip networkingv1.IPAddress) bool {
			r, err := netip.ParsePrefix(ip.Annotations[ipam.AnnotationClaimRange])
			return err != nil || !cluster.Overlaps(r)
		})
		return len(claims) == count
	})
	byNode := map[string]networkingv1.IPAddress{}
	for _, ip := range claims {
		byNode[ip.Spec.ParentRef.Name] = ip
	}
	for _, n := range live.Items {
		ip, ok := byNode[n.Name]
		switch {
		case !ok:
			t.Errorf("Node %s has no claim", n.Name)
		case ip.Labels[ipam.LabelClaimNodeUID] != string(n.UID) || ip.Annotations[ipam.AnnotationClaimRange] != n.Spec.PodCIDR:
			t.Errorf("Node %s (%s, %s) has claim %s for %s, %s", n.Name, n.UID, n.Spec.PodCIDR, ip.Name,
				ip.Labels[ipam.LabelClaimNodeUID], ip.Annotations[ipam.AnnotationClaimRange])
		}
	}

	// Writes: Node patches per name (a churned name had two Node objects), and claims.
	evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "nodes", "ipaddresses"))
	if err != nil {
		t.Fatal(err)
	}
	patches := map[string]int{}
	var claimCreates, claimConflicts, claimDeletes, stale int
	for _, ev := range evs {
		switch {
		case ev.ObjectRef.Resource == "nodes" && ev.Verb == "patch" && strings.HasPrefix(ev.ObjectRef.Name, "split-"):
			patches[ev.ObjectRef.Name]++
			if ev.ResponseStatus.Code == http.StatusConflict {
				stale++
			}
		case ev.ObjectRef.Resource == "ipaddresses" && ev.Verb == "create":
			claimCreates++
			if ev.ResponseStatus.Code == http.StatusConflict {
				claimConflicts++
			}
		case ev.ObjectRef.Resource == "ipaddresses" && ev.Verb == "delete":
			claimDeletes++
		}
	}
	most, total := 0, 0
	for _, n := range patches {
		most = max(most, n)
		total += n
	}
	collisions := 0.0
	for _, ctl := range ctls {
		collisions += ctl.Metric("kcm_split_nodelifecycle_cidr_claim_collisions_total")
	}
	t.Logf("%d live Nodes (%d names churned), %d distinct ranges; Node patches %d (%d refused as stale), at most %d for one name, %.2f per name; claims created %d (%d AlreadyExists), deleted %d; collisions counted %v",
		len(got), len(churned), len(owner), total, stale, most, float64(total)/float64(count), claimCreates, claimConflicts, claimDeletes, collisions)
	// Per Node object: each of the two allocators writes at most maxPatchTries times per
	// sync, and a sync ends with the range set; a churned name had two objects.
	const bound = 2 * 2 * 3
	for name, n := range patches {
		if n > bound {
			t.Errorf("Node %s patched %d times, more than %d", name, n, bound)
		}
	}
}
