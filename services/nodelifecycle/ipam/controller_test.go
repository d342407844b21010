package ipam

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

// fixture is the controller over a fake clientset; the test fills the Node cache and calls
// rebuild and sync directly.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	recorder *record.FakeRecorder
	reg      *prometheus.Registry
	c        *Controller
	nodes    cache.Indexer
	claims   cache.Indexer
}

func newFixture(t *testing.T, opts Options, objs ...runtime.Object) *fixture {
	t.Helper()
	opts.Allocate = true
	cfg, err := opts.Config()
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	f := &fixture{t: t, client: client, recorder: record.NewFakeRecorder(100), reg: prometheus.NewRegistry(),
		nodes: factory.Core().V1().Nodes().Informer().GetIndexer()}
	f.claims = factory.Networking().V1().IPAddresses().Informer().GetIndexer()
	f.c, err = New(factory.Core().V1().Nodes(), factory.Networking().V1().IPAddresses(), client, f.recorder, cfg, f.reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.c.queue.ShutDown)
	for _, o := range objs {
		switch o := o.(type) {
		case *networkingv1.IPAddress:
			// Claims found at start: the informer's handler runs before the rebuild.
			if err := f.claims.Add(o); err != nil {
				t.Fatal(err)
			}
			f.c.onClaim(o)
		default:
			if err := f.nodes.Add(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.c.rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	return f
}

func node(name string, cidrs ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7"}}
	if len(cidrs) > 0 {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = cidrs[0], cidrs
	}
	return n
}

// add creates a Node in the clientset and the cache, as a kubelet registering.
func (f *fixture) add(n *v1.Node) {
	f.t.Helper()
	if _, err := f.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	if err := f.nodes.Add(n); err != nil {
		f.t.Fatal(err)
	}
}

// remove deletes a Node from the clientset and the cache.
func (f *fixture) remove(name string) {
	f.t.Helper()
	_ = f.client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	if err := f.nodes.Delete(node(name)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) sync(name string) error {
	return f.c.sync(context.Background(), name)
}

// mustSync syncs name and then lets the cache catch up with what was written.
func (f *fixture) mustSync(name string) {
	f.t.Helper()
	if err := f.sync(name); err != nil {
		f.t.Fatalf("sync %s: %v", name, err)
	}
	fixtures.CatchUp(f.t, f.client.Tracker(), f.nodes, v1.SchemeGroupVersion.WithResource("nodes"), "Node")
}

func (f *fixture) cidrs(name string) []string {
	f.t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(n.Spec.PodCIDRs) > 0 && n.Spec.PodCIDR != n.Spec.PodCIDRs[0] {
		f.t.Fatalf("node %s: podCIDR %s is not podCIDRs[0] of %v", name, n.Spec.PodCIDR, n.Spec.PodCIDRs)
	}
	return n.Spec.PodCIDRs
}

// patches are the Node patches written, as their bodies.
func (f *fixture) patches() []string {
	var out []string
	for _, a := range fixtures.Writes(f.client.Actions()) {
		if p, ok := a.(clienttesting.PatchAction); ok && a.GetResource().Resource == "nodes" {
			out = append(out, p.GetName()+" "+string(p.GetPatch()))
			continue
		}
		if a.GetResource().Resource == "ipaddresses" {
			continue // claims: see claimWrites
		}
		if a.GetVerb() != "create" && a.GetVerb() != "delete" {
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return out
}

// failPatches makes the next n Node patches fail as an apiserver outage would (n < 0: all).
func (f *fixture) failPatches(n int) {
	f.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		if n == 0 {
			return false, nil, nil
		}
		n--
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
}

func (f *fixture) events() []string { return fixtures.Events(f.recorder) }

func hasEvent(evs []string, substr string) bool {
	return slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, substr) })
}

func TestDualStackNodesGetOneDistinctRangePerFamily(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/24,fd00::/64", MaskSizeIPv4: 26, MaskSizeIPv6: 66})
	want := map[string][]string{
		"a": {"10.0.0.0/26", "fd00::/66"},
		"b": {"10.0.0.64/26", "fd00:0:0:0:4000::/66"},
		"c": {"10.0.0.128/26", "fd00:0:0:0:8000::/66"},
	}
	for _, name := range []string{"a", "b", "c"} {
		f.add(node(name))
		f.mustSync(name)
	}
	for name, w := range want {
		got := f.cidrs(name)
		for i := range w {
			w[i] = mustPrefix(w[i]).String() // the canonical spelling
		}
		if !slices.Equal(got, w) {
			t.Errorf("node %s: %v, want %v", name, got, w)
		}
	}
	// A resync writes nothing: every Node has its ranges.
	before := len(f.patches())
	for _, name := range []string{"a", "b", "c"} {
		f.mustSync(name)
	}
	if after := f.patches(); len(after) != before {
		t.Errorf("resync wrote %v", after[before:])
	}
	if evs := f.events(); len(evs) != 0 {
		t.Errorf("events: %v", evs)
	}
}

func TestExistingRangesAreHonouredAndNeverHandedOut(t *testing.T) {
	// Three of four ranges are on Nodes already (one of them written before a restart,
	// one preset by hand in the middle): the new Node gets the fourth.
	f := newFixture(t, Options{ClusterCIDR: "192.0.2.0/24", MaskSize: 26},
		node("old-1", "192.0.2.0/26"), node("old-2", "192.0.2.128/26"), node("old-3", "192.0.2.64/26"))
	f.add(node("new"))
	f.mustSync("new")
	if got := f.cidrs("new"); !slices.Equal(got, []string{"192.0.2.192/26"}) {
		t.Fatalf("new Node got %v", got)
	}
	for _, name := range []string{"old-1", "old-2", "old-3"} {
		f.mustSync(name)
	}
	if p := f.patches(); len(p) != 1 {
		t.Fatalf("writes: %v, want only the new Node's", p)
	}
}

func TestExhaustionWaitsWithOneEventThenTakesTheFreedRange(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "192.0.2.0/30", MaskSize: 31})
	for _, name := range []string{"a", "b", "c"} {
		f.add(node(name))
		f.mustSync(name)
	}
	if got := f.cidrs("c"); len(got) != 0 {
		t.Fatalf("third Node got %v from a space of two", got)
	}
	evs := f.events()
	if len(evs) != 1 || !strings.Contains(evs[0], "Warning CIDRNotAvailable") || !strings.Contains(evs[0], "192.0.2.0/30") {
		t.Fatalf("events %v, want one CIDRNotAvailable", evs)
	}
	if err := testutil.CollectAndCompare(f.reg, strings.NewReader(`
# HELP kcm_split_nodelifecycle_nodes_waiting_for_cidr Nodes without a Pod range because their cluster CIDR has no free range; each gets one as soon as one is freed.
# TYPE kcm_split_nodelifecycle_nodes_waiting_for_cidr gauge
kcm_split_nodelifecycle_nodes_waiting_for_cidr 1
`), "kcm_split_nodelifecycle_nodes_waiting_for_cidr"); err != nil {
		t.Error(err)
	}
	// A heartbeat of the waiting Node queues nothing; trying again records no new Event.
	fixtures.Drain[string](f.c.queue)
	f.c.onUpdate(node("c"), node("c"))
	if got := fixtures.Drain[string](f.c.queue); len(got) != 0 {
		t.Errorf("an update of a waiting Node queued %v", got)
	}
	f.mustSync("c")
	if evs := f.events(); len(evs) != 0 {
		t.Errorf("retry recorded %v", evs)
	}

	// Deleting a frees its range and queues the waiting Node, which takes it.
	aRange := f.cidrs("a")
	f.remove("a")
	f.mustSync("a")
	if got := fixtures.Drain[string](f.c.queue); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("after the release the queue held %v, want the waiting Node", got)
	}
	f.mustSync("c")
	if got := f.cidrs("c"); !slices.Equal(got, aRange) {
		t.Fatalf("waiting Node got %v, want the freed %v", got, aRange)
	}
	if err := testutil.CollectAndCompare(f.reg, strings.NewReader(`
# HELP node_ipam_controller_cidrset_cidrs_allocations_total Ranges taken: handed to a Node, or found on a Node or in the Service range and marked used.
# TYPE node_ipam_controller_cidrset_cidrs_allocations_total counter
node_ipam_controller_cidrset_cidrs_allocations_total{clusterCIDR="192.0.2.0/30"} 3
# HELP node_ipam_controller_cidrset_cidrs_releases_total Ranges freed.
# TYPE node_ipam_controller_cidrset_cidrs_releases_total counter
node_ipam_controller_cidrset_cidrs_releases_total{clusterCIDR="192.0.2.0/30"} 1
# HELP node_ipam_controller_cidrset_usage_cidrs Fraction (0..1) of the cluster CIDR's ranges in use.
# TYPE node_ipam_controller_cidrset_usage_cidrs gauge
node_ipam_controller_cidrset_usage_cidrs{clusterCIDR="192.0.2.0/30"} 1
# HELP node_ipam_controller_cirdset_max_cidrs Number of ranges the cluster CIDR holds.
# TYPE node_ipam_controller_cirdset_max_cidrs gauge
node_ipam_controller_cirdset_max_cidrs{clusterCIDR="192.0.2.0/30"} 2
# HELP kcm_split_nodelifecycle_nodes_waiting_for_cidr Nodes without a Pod range because their cluster CIDR has no free range; each gets one as soon as one is freed.
# TYPE kcm_split_nodelifecycle_nodes_waiting_for_cidr gauge
kcm_split_nodelifecycle_nodes_waiting_for_cidr 0
`), "node_ipam_controller_cidrset_cidrs_allocations_total", "node_ipam_controller_cidrset_cidrs_releases_total",
		"node_ipam_controller_cidrset_usage_cidrs", "node_ipam_controller_cirdset_max_cidrs", "kcm_split_nodelifecycle_nodes_waiting_for_cidr"); err != nil {
		t.Error(err)
	}
}

func TestDualStackAllOrNothing(t *testing.T) {
	// IPv6 has one range, IPv4 many: the second Node takes no IPv4 range it could not use.
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/24,fd00::/64", MaskSizeIPv4: 28, MaskSizeIPv6: 64})
	f.add(node("a"))
	f.mustSync("a")
	f.add(node("b"))
	f.mustSync("b")
	if got := f.cidrs("b"); len(got) != 0 {
		t.Fatalf("b got %v", got)
	}
	if used := f.c.families[0].set.Used(); used != 1 {
		t.Errorf("IPv4 ranges in use: %d, want 1 (a's)", used)
	}
}

func TestRangeOutsideTheClusterCIDRGetsAnEventNotARewrite(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/16"}, node("stray", "10.99.0.0/24"))
	f.mustSync("stray")
	if p := f.patches(); len(p) != 0 {
		t.Fatalf("writes: %v", p)
	}
	evs := f.events()
	if len(evs) != 1 || !strings.Contains(evs[0], "Warning CIDROutOfRange") || !strings.Contains(evs[0], "10.99.0.0/24") {
		t.Fatalf("events %v, want one CIDROutOfRange", evs)
	}
	// An IPv6 range on an IPv4-only cluster is outside too.
	f.add(node("v6", "fd00::/64"))
	f.mustSync("v6")
	if evs := f.events(); !hasEvent(evs, "CIDROutOfRange") {
		t.Errorf("events %v", evs)
	}
}

func TestSharedPresetRangeIsHeldUntilBothNodesAreGone(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "192.0.2.0/30", MaskSize: 31},
		node("a", "192.0.2.0/31"), node("b", "192.0.2.0/31"))
	if evs := f.events(); len(evs) != 1 || !strings.Contains(evs[0], "Warning CIDRConflict") {
		t.Fatalf("events %v, want one CIDRConflict", evs)
	}
	f.remove("a")
	f.mustSync("a")
	// b still uses 192.0.2.0/31: two new Nodes, one range left.
	f.add(node("c"))
	f.mustSync("c")
	f.add(node("d"))
	f.mustSync("d")
	if got := f.cidrs("c"); !slices.Equal(got, []string{"192.0.2.2/31"}) {
		t.Fatalf("c got %v", got)
	}
	if got := f.cidrs("d"); len(got) != 0 {
		t.Fatalf("d got %v, a range b still uses", got)
	}
}

func TestServiceRangeIsNeverHandedOut(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/24", MaskSize: 26, ServiceCIDR: "10.0.0.64/27"})
	var got []string
	for _, name := range []string{"a", "b", "c", "d"} {
		f.add(node(name))
		f.mustSync(name)
		got = append(got, f.cidrs(name)...)
	}
	if !slices.Equal(got, []string{"10.0.0.0/26", "10.0.0.128/26", "10.0.0.192/26"}) {
		t.Fatalf("ranges %v", got)
	}
}

func TestRefusedWriteTakesTheRangeTheNodeGotElsewhere(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/16"})
	f.add(node("a"))
	// Someone else sets a's range between our read and our write: the apiserver refuses
	// to change it.
	f.client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		n := node("a", "10.0.9.0/24")
		if err := f.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "a",
			field.ErrorList{field.Forbidden(field.NewPath("spec", "podCIDRs"), "node updates may not change podCIDR except from \"\" to valid")})
	})
	f.mustSync("a")
	set := f.c.families[0].set
	if set.Used() != 1 || !set.Held(mustPrefix("10.0.9.0/24")) || set.Held(mustPrefix("10.0.0.0/24")) {
		t.Fatalf("used %d; want only the Node's own 10.0.9.0/24 held", set.Used())
	}
	if evs := f.events(); len(evs) != 0 {
		t.Errorf("events %v", evs)
	}
}

func TestFailedWriteKeepsTheReservationForTheRetry(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/16"})
	f.add(node("a"))
	f.failPatches(1)
	if err := f.sync("a"); err == nil {
		t.Fatal("a failed write was not returned for a retry")
	}
	if evs := f.events(); len(evs) != 1 || !strings.Contains(evs[0], "CIDRAssignmentFailed") {
		t.Fatalf("events %v", evs)
	}
	// Another Node meanwhile does not get a's reserved range; a's retry writes the same one.
	f.add(node("b"))
	f.mustSync("b")
	f.mustSync("a")
	if a, b := f.cidrs("a"), f.cidrs("b"); !slices.Equal(a, []string{"10.0.0.0/24"}) || !slices.Equal(b, []string{"10.0.1.0/24"}) {
		t.Fatalf("a %v b %v", a, b)
	}
	var bodies []map[string]any
	for _, p := range f.patches() {
		var body map[string]any
		if err := json.Unmarshal([]byte(p[strings.IndexByte(p, ' ')+1:]), &body); err != nil {
			t.Fatal(err)
		}
		if rv, _ := body["metadata"].(map[string]any)["resourceVersion"].(string); rv != "7" {
			t.Errorf("patch %s is not conditioned on the Node's resourceVersion 7", p)
		}
		bodies = append(bodies, body)
	}
	if len(bodies) != 3 {
		t.Errorf("patches %v, want a's failed one, b's, a's retry", f.patches())
	}
}

func TestDeletedNodeWithWriteInFlightFreesItsRange(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "192.0.2.0/31", MaskSize: 31})
	f.add(node("a"))
	// The Node is gone from the apiserver but still in the cache: the write finds it gone.
	_ = f.client.CoreV1().Nodes().Delete(context.Background(), "a", metav1.DeleteOptions{})
	if err := f.sync("a"); err != nil {
		t.Fatal(err)
	}
	if used := f.c.families[0].set.Used(); used != 0 {
		t.Fatalf("%d ranges still used after the Node vanished", used)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestNewNeedsARange(t *testing.T) {
	if _, err := New(nil, nil, nil, nil, Config{}, nil); err == nil || !strings.Contains(err.Error(), "no cluster CIDR") {
		t.Fatalf("New without ranges: %v", err)
	}
}

func TestRecreatedNodeDoesNotInheritItsPredecessorsRanges(t *testing.T) {
	// a and b were both registered with 192.0.2.0/31. a is deleted and registered again (a
	// new UID, no range) before the delete is processed: the new a gets the other range,
	// not the one b still uses.
	f := newFixture(t, Options{ClusterCIDR: "192.0.2.0/30", MaskSize: 31},
		node("a", "192.0.2.0/31"), node("b", "192.0.2.0/31"))
	f.events()
	f.remove("a")
	again := node("a")
	again.UID = "uid-a-again"
	f.add(again)
	f.mustSync("a")
	if got := f.cidrs("a"); !slices.Equal(got, []string{"192.0.2.2/31"}) {
		t.Fatalf("re-registered a got %v, want the free 192.0.2.2/31", got)
	}
	if !f.c.families[0].set.Held(mustPrefix("192.0.2.0/31")) {
		t.Fatal("b's range was freed with a's")
	}
	// Once b is gone too, nothing holds 192.0.2.0/31 any more: the first a's hold is gone.
	f.remove("b")
	f.mustSync("b")
	if f.c.families[0].set.Held(mustPrefix("192.0.2.0/31")) {
		t.Fatal("192.0.2.0/31 is still held after both Nodes that had it are gone")
	}
}

func TestReservationClaimedByAPresetIsNotWritten(t *testing.T) {
	// a's write fails, keeping 10.0.0.0/24 reserved; then b registers with that range preset.
	// a's retry must not write a range b has.
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/16"})
	f.add(node("a"))
	f.failPatches(1)
	if err := f.sync("a"); err == nil {
		t.Fatal("no retry asked for")
	}
	f.add(node("b", "10.0.0.0/24"))
	f.mustSync("b")
	f.mustSync("a")
	if got := f.cidrs("a"); len(got) != 1 || got[0] == "10.0.0.0/24" {
		t.Fatalf("a got %v", got)
	}
}

func TestPendingWriteIsRetriedWithBackoffNotOnUpdates(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/16"})
	f.add(node("a"))
	f.failPatches(-1)
	if err := f.sync("a"); err == nil {
		t.Fatal("no retry asked for")
	}
	fixtures.Drain[string](f.c.queue)
	f.c.onUpdate(node("a"), node("a")) // a heartbeat
	if got := fixtures.Drain[string](f.c.queue); len(got) != 0 {
		t.Fatalf("a heartbeat of a Node with a pending write queued %v at once", got)
	}
	// A Node without a reservation is queued by an update (it may have been missed).
	f.c.onUpdate(node("other"), node("other"))
	if got := fixtures.Drain[string](f.c.queue); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("queued %v", got)
	}
}

func TestTerminatingNodeStopsWaiting(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "192.0.2.0/31", MaskSize: 31})
	f.add(node("a"))
	f.mustSync("a")
	f.add(node("b"))
	f.mustSync("b")
	if f.c.waiting["b"] != true {
		t.Fatal("b is not waiting")
	}
	b := node("b")
	now := metav1.Now()
	b.DeletionTimestamp = &now
	if err := f.nodes.Update(b); err != nil {
		t.Fatal(err)
	}
	f.mustSync("b")
	if len(f.c.waiting) != 0 || testutil.ToFloat64(f.c.metrics.waiting) != 0 {
		t.Fatalf("a terminating Node still counts as waiting: %v", f.c.waiting)
	}
}

func TestFullFamilyTakesNothingFromTheOther(t *testing.T) {
	// Waking a Node that waits on a full IPv6 family takes and frees no IPv4 range.
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/24,fd00::/64", MaskSizeIPv4: 28, MaskSizeIPv6: 64})
	f.add(node("a"))
	f.mustSync("a")
	f.add(node("b"))
	for range 3 {
		f.mustSync("b")
	}
	if v := testutil.ToFloat64(f.c.metrics.allocations.WithLabelValues("10.0.0.0/24")); v != 1 {
		t.Errorf("IPv4 allocations %v, want 1 (a's)", v)
	}
	if v := testutil.ToFloat64(f.c.metrics.releases.WithLabelValues("10.0.0.0/24")); v != 0 {
		t.Errorf("IPv4 releases %v, want 0", v)
	}
}

// Fewer free ranges than --node-cidr-free-ranges-warning: one Warning Event per episode, on
// the kube-node-lease Namespace; Nodes coming and going near the threshold repeat nothing;
// once twice the threshold is free again, a new shortage gets its own Event. The free
// ranges are a gauge per cluster CIDR.
func TestFewFreeRangesWarnOncePerEpisode(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/26", MaskSize: 29, FreeRangesWarning: 3}) // 8 ranges
	lows := func() int {
		n := 0
		for _, e := range f.events() {
			if strings.Contains(e, "Warning CIDRRangesRunningLow") {
				n++
			}
		}
		return n
	}
	free := func() float64 {
		return testutil.ToFloat64(f.c.metrics.free.WithLabelValues("10.0.0.0/26"))
	}
	if got := free(); got != 8 {
		t.Fatalf("free ranges at start = %v, want 8", got)
	}
	add := func(names ...string) {
		for _, n := range names {
			f.add(node(n))
			f.mustSync(n)
		}
	}
	del := func(names ...string) {
		for _, n := range names {
			f.remove(n)
			f.mustSync(n)
		}
	}
	add("a", "b", "c", "d", "e") // 3 free: not fewer than 3
	if got := lows(); got != 0 {
		t.Fatalf("%d warnings with 3 free, want none", got)
	}
	add("f") // 2 free
	evs := f.events()
	if len(evs) != 1 || !strings.Contains(evs[0], "Warning CIDRRangesRunningLow Only 2 of the 8 Pod ranges (/29) of cluster CIDR 10.0.0.0/26 are free") {
		t.Errorf("events %q, want one CIDRRangesRunningLow", evs)
	}
	if got := free(); got != 2 {
		t.Errorf("free ranges = %v, want 2", got)
	}
	add("g")
	del("g")
	del("f", "e", "d") // 5 free: fewer than twice the threshold, the episode goes on
	add("d")
	if got := lows(); got != 0 {
		t.Errorf("%d more warnings within one episode, want none", got)
	}
	del("d", "c")           // 6 free: the episode ends
	add("c", "d", "e", "f") // 2 free: a new episode
	if got := lows(); got != 1 {
		t.Errorf("%d warnings for the second shortage, want 1", got)
	}
}

// The reconcile metrics carry upstream's name of the controller, the value --controllers takes.
func TestReconcileMetricsCarryUpstreamName(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/16"})
	if got := metricstest.LabelValues(t, f.reg, "kcm_split_reconcile_total", "controller"); got != Name {
		t.Fatalf("controller label %q, want %q", got, Name)
	}
}
