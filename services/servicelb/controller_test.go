package servicelb

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
	"github.com/kcm-split/kcm-split/shared/worker"
)

func TestEnsureWritesFinalizerThenStatusAndNothingOnResync(t *testing.T) {
	f := newFixture(t, testOptions(), lb("web"))
	f.pool("p", []string{"192.0.2.10-192.0.2.20"})
	f.c.restore(context.Background())

	if err := f.sync("web"); err != nil {
		t.Fatal(err)
	}
	if got := f.writes(); !slices.Equal(got, []string{"patch web", "patch web/status"}) {
		t.Fatalf("writes = %v, want the finalizer patch, then the status patch", got)
	}
	s := f.stored("web")
	if !hasFinalizer(s) || !slices.Equal(ips(s), []string{"192.0.2.10"}) || *s.Status.LoadBalancer.Ingress[0].IPMode != v1.LoadBalancerIPModeVIP {
		t.Fatalf("stored: finalizers %v ingress %v", s.Finalizers, s.Status.LoadBalancer.Ingress)
	}
	evs := strings.Join(f.events(), "\n")
	for _, r := range []string{ReasonEnsuring, ReasonEnsured} {
		if !strings.Contains(evs, r) {
			t.Fatalf("no %s event in\n%s", r, evs)
		}
	}
	if testutil.ToFloat64(f.c.metrics.lbSync) != 1 {
		t.Fatalf("loadbalancer_sync_total = %v", testutil.ToFloat64(f.c.metrics.lbSync))
	}

	// Caught up: a resync changes nothing and emits nothing.
	f.catchUp()
	if err := f.sync("web"); err != nil || len(f.writes()) != 0 {
		t.Fatalf("resync: err %v, writes %v", err, f.writes())
	}
	if evs := f.events(); len(evs) != 0 {
		t.Fatalf("resync emitted %v", evs)
	}
}

func isRequeue(err error) bool {
	_, ok := err.(*worker.Requeue)
	return ok
}

// The fake clientset keeps resourceVersions as they are, so the stale path is driven by
// hand here: a cache showing a version the controller replaced makes no write.
func TestStaleCacheMakesNoWrite(t *testing.T) {
	f := newFixture(t, testOptions(), lb("web"))
	f.pool("p", []string{"192.0.2.10-192.0.2.20"})
	f.c.restore(context.Background())
	newer := lb("web")
	newer.ResourceVersion = "2"
	f.c.stale.Wrote(testNS+"/web", "1", newer)
	if err := f.sync("web"); !isRequeue(err) || len(f.writes()) != 0 {
		t.Fatalf("sync on a stale cache: err %v, writes %v", err, f.writes())
	}
	f.cache(newer)
	if err := f.sync("web"); err != nil || len(f.writes()) != 2 {
		t.Fatalf("sync once caught up: err %v, writes %v", err, f.writes())
	}
	if f.c.stale.Stale(testNS+"/web", lb("web")) {
		t.Fatal("records of a key are kept after the cache caught up")
	}
}

func TestOtherClassAndOtherTypesUntouched(t *testing.T) {
	other := lb("other", func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/lb") })
	cluster := lb("cluster", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeClusterIP })
	// Another controller's finalizer and status on a Service of its class stay.
	theirs := lb("theirs", withFinalizer(), withIngress("203.0.113.1"), func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/lb") })
	f := newFixture(t, testOptions(), other, cluster, theirs)
	f.pool("p", []string{"192.0.2.0/24"})
	f.c.restore(context.Background())
	for _, n := range []string{"other", "cluster", "theirs"} {
		if err := f.sync(n); err != nil || len(f.writes()) != 0 {
			t.Fatalf("%s: err %v writes %v", n, err, f.writes())
		}
	}
	if held := f.c.state.Holding(); len(held) != 0 {
		t.Fatalf("allocator holds %v", held)
	}
}

func TestClassOption(t *testing.T) {
	mine := lb("mine", func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr.To("lb.kcm-split.io/pools") })
	plain := lb("plain")
	opts := testOptions()
	opts.LoadBalancerClass = "lb.kcm-split.io/pools"
	f := newFixture(t, opts, mine, plain)
	f.pool("p", []string{"192.0.2.0/24"})
	if err := f.sync("plain"); err != nil || len(f.writes()) != 0 {
		t.Fatalf("plain: err %v writes %v", err, f.writes())
	}
	if err := f.sync("mine"); err != nil || len(f.writes()) != 2 {
		t.Fatalf("mine: err %v writes %v", err, f.writes())
	}
}

func TestCleanupOnTypeChangeClearsStatusThenFinalizerThenFrees(t *testing.T) {
	svc := lb("a", withFinalizer(), withIngress("192.0.2.1"))
	f := newFixture(t, testOptions(), svc, lb("b", withFinalizer()))
	f.pool("p", []string{"192.0.2.1/32"})
	f.c.restore(context.Background())
	if err := f.sync("b"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(f.events(), "\n"), ReasonAllocationFailed) {
		t.Fatal("b is pending without an AllocationFailed event")
	}
	f.queued()

	changed := svc.DeepCopy()
	changed.Spec.Type = v1.ServiceTypeClusterIP
	changed.ResourceVersion = "2"
	f.cache(changed)
	if _, err := f.client.CoreV1().Services(testNS).Update(context.Background(), changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("a"); err != nil {
		t.Fatal(err)
	}
	if got := f.writes(); !slices.Equal(got, []string{"patch a/status", "patch a"}) {
		t.Fatalf("writes = %v, want status cleared, then the finalizer removed", got)
	}
	s := f.stored("a")
	if hasFinalizer(s) || len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Fatalf("a: finalizers %v ingress %v", s.Finalizers, ips(s))
	}
	if got := f.queued(); !slices.Equal(got, []string{testNS + "/b"}) {
		t.Fatalf("queued after the release: %v, want the pending b", got)
	}
	evs := strings.Join(f.events(), "\n")
	if !strings.Contains(evs, ReasonDeleting) || !strings.Contains(evs, ReasonDeleted) {
		t.Fatalf("events %s", evs)
	}
	if err := f.sync("b"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("b")); !slices.Equal(got, []string{"192.0.2.1"}) {
		t.Fatalf("b got %v", got)
	}
}

func TestDeletionWithFinalizer(t *testing.T) {
	svc := lb("a", withFinalizer(), withIngress("192.0.2.1"))
	f := newFixture(t, testOptions(), svc)
	f.pool("p", []string{"192.0.2.1/32"})
	f.c.restore(context.Background())
	deleting := svc.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	deleting.ResourceVersion = "2"
	f.cache(deleting)
	if err := f.sync("a"); err != nil {
		t.Fatal(err)
	}
	// A Service going away keeps its status: only the finalizer is removed.
	if got := f.writes(); !slices.Equal(got, []string{"patch a"}) {
		t.Fatalf("writes = %v", got)
	}
	if len(f.c.state.Holding()) != 0 {
		t.Fatalf("still held: %v", f.c.state.Holding())
	}
}

func TestRestoreKeepsStatusAndOlderWins(t *testing.T) {
	old := lb("old", withFinalizer(), withIngress("192.0.2.5"), created(1))
	young := lb("young", withFinalizer(), withIngress("192.0.2.5"), created(2)) // a hand edit
	f := newFixture(t, testOptions(), old, young, lb("new"))
	f.pool("p", []string{"192.0.2.5-192.0.2.6"})
	f.c.restore(context.Background())
	if got := f.c.state.Holding(); !slices.Equal(got, []string{testNS + "/old"}) {
		t.Fatalf("restored %v, want only the older holder", got)
	}
	if err := f.sync("old"); err != nil || len(f.writes()) != 0 {
		t.Fatalf("old: err %v writes %v (restored state must need no write)", err, f.writes())
	}
	if err := f.sync("young"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("young")); !slices.Equal(got, []string{"192.0.2.6"}) {
		t.Fatalf("young moved to %v, want 192.0.2.6", got)
	}
	if err := f.sync("new"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("new")); len(got) != 0 {
		t.Fatalf("new got %v from a full pool", got)
	}
}

func TestPoolShrinkMovesWithEvent(t *testing.T) {
	svc := lb("a", withFinalizer(), withIngress("192.0.2.1"))
	f := newFixture(t, testOptions(), svc)
	f.pool("p", []string{"192.0.2.1/32"})
	f.c.restore(context.Background())
	f.queued()
	f.pool("p", []string{"192.0.2.9/32"}, func(p *v1alpha1.IPAddressPool) { p.Generation = 2 })
	if got := f.queued(); !slices.Equal(got, []string{testNS + "/a"}) {
		t.Fatalf("queued after the pool edit: %v", got)
	}
	if err := f.sync("a"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("a")); !slices.Equal(got, []string{"192.0.2.9"}) {
		t.Fatalf("a = %v", got)
	}
	if evs := strings.Join(f.events(), "\n"); !strings.Contains(evs, ReasonAddressReassigned) {
		t.Fatalf("no %s event: %s", ReasonAddressReassigned, evs)
	}
}

func TestBadRequestIsReportedNotRetried(t *testing.T) {
	f := newFixture(t, testOptions(), lb("a", withAnnotation(poolsource.AnnotationLoadBalancerIPs, "nope")), lb("b", withAnnotation(poolsource.AnnotationAddressPool, "missing")))
	f.pool("p", []string{"192.0.2.0/24"})
	f.c.restore(context.Background())
	for _, n := range []string{"a", "b"} {
		if err := f.sync(n); err != nil {
			t.Fatalf("%s: %v (bad input must not be retried with backoff)", n, err)
		}
		if got := ips(f.stored(n)); len(got) != 0 {
			t.Fatalf("%s got %v", n, got)
		}
		if evs := strings.Join(f.events(), "\n"); !strings.Contains(evs, ReasonSyncFailed) {
			t.Fatalf("%s: no %s event in %s", n, ReasonSyncFailed, evs)
		}
		// Reported once: a resync repeats nothing.
		f.catchUp()
		if err := f.sync(n); err != nil || len(f.writes()) != 0 {
			t.Fatalf("%s resync: %v, %v", n, err, f.writes())
		}
		if evs := f.events(); len(evs) != 0 {
			t.Fatalf("%s resync repeated %v", n, evs)
		}
	}
}

func TestRequireDualStackHoldsNothingWhilePending(t *testing.T) {
	ds := lb("ds", func(s *v1.Service) {
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
	})
	pref := lb("pref", func(s *v1.Service) {
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
	})
	f := newFixture(t, testOptions(), ds, pref)
	f.pool("v4", []string{"192.0.2.1/32"})
	f.c.restore(context.Background())
	if err := f.sync("ds"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("ds")); len(got) != 0 || len(f.c.state.Holding()) != 0 {
		t.Fatalf("ds got %v, allocator %v: a RequireDualStack Service without IPv6 must hold nothing", got, f.c.state.Holding())
	}
	if err := f.sync("pref"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("pref")); !slices.Equal(got, []string{"192.0.2.1"}) {
		t.Fatalf("PreferDualStack got %v, want the IPv4 address alone", got)
	}
	f.pool("v6", []string{"2001:db8::1/128"})
	f.catchUp()
	if err := f.sync("pref"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("pref")); !slices.Equal(got, []string{"2001:db8::1", "192.0.2.1"}) {
		t.Fatalf("pref = %v, want both, in its family order", got)
	}
}

func TestPoolStatusAndCondition(t *testing.T) {
	f := newFixture(t, testOptions(), lb("a"))
	f.pool("good", []string{"192.0.2.0/30", "2001:db8::/126"})
	f.pool("bad", []string{"192.0.2.9-192.0.2.1"})
	f.c.restore(context.Background())
	if err := f.sync("a"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []string{"good", "bad"} {
		if err := f.c.syncPoolStatus(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	good, err := v1alpha1.NewClient(f.dyn).Get(ctx, "good")
	if err != nil {
		t.Fatal(err)
	}
	st := good.Status
	if st.AssignedIPv4 != 1 || st.AvailableIPv4 != 3 || st.AssignedIPv6 != 0 || st.AvailableIPv6 != 4 {
		t.Fatalf("good status %+v", st)
	}
	if len(st.Conditions) != 1 || st.Conditions[0].Status != metav1.ConditionTrue {
		t.Fatalf("good conditions %+v", st.Conditions)
	}
	bad, _ := v1alpha1.NewClient(f.dyn).Get(ctx, "bad")
	if len(bad.Status.Conditions) != 1 || bad.Status.Conditions[0].Status != metav1.ConditionFalse || bad.Status.Conditions[0].Reason != v1alpha1.ReasonInvalidAddresses {
		t.Fatalf("bad conditions %+v", bad.Status.Conditions)
	}
	// Unchanged status: no write. Put the written pool into the cache first.
	u, _ := v1alpha1.ToUnstructured(good)
	_ = f.pools.Update(u)
	f.dyn.ClearActions()
	if err := f.c.syncPoolStatus(ctx, "good"); err != nil || len(f.dyn.Actions()) != 0 {
		t.Fatalf("resync of an unchanged pool: %v, %v", err, f.dyn.Actions())
	}
}

func TestNodeSet(t *testing.T) {
	f := newFixture(t, testOptions())
	excluded := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ex", Labels: map[string]string{v1.LabelNodeExcludeBalancers: "true"}}}
	notExcluded := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nx", Labels: map[string]string{v1.LabelNodeExcludeBalancers: "false"}}}
	deleting := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "del", DeletionTimestamp: ptr.To(metav1.Now()), Finalizers: []string{"x"}}}
	draining := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: toBeDeletedTaint, Effect: v1.TaintEffectNoSchedule}}}}
	f.cache(excluded, notExcluded, deleting, draining)
	if err := f.c.syncNodes(context.Background(), nodeSetKey); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.c.lastNodeSet(), []string{"node-1", "nx"}) {
		t.Fatalf("node set %v", f.c.lastNodeSet())
	}
	if testutil.ToFloat64(f.c.metrics.nodes) != 2 {
		t.Fatal("eligible nodes gauge not set")
	}
	// A later change tells the Services this controller balances, as upstream.
	f.cache(lb("balanced", withFinalizer(), withIngress("10.0.0.1")), lb("new"),
		lb("plain", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeClusterIP }))
	f.cache(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}})
	if err := f.c.syncNodes(context.Background(), nodeSetKey); err != nil {
		t.Fatal(err)
	}
	if evs := f.events(); !slices.Equal(evs, []string{"Normal UpdatedLoadBalancer Updated load balancer with new hosts"}) {
		t.Errorf("events after a node joined: %v", evs)
	}
	if n := testutil.CollectAndCount(f.c.metrics.hostUpdate); n != 1 {
		t.Errorf("host update latency series: %d", n)
	}
	// No change, no Event.
	if err := f.c.syncNodes(context.Background(), nodeSetKey); err != nil || len(f.events()) != 0 {
		t.Errorf("a node sync without a change: %v, events", err)
	}
	// Only a change of eligibility queues a node sync.
	f.c.onNodeUpdate(notExcluded, notExcluded.DeepCopy())
	if f.c.nodeQueue.Len() != 0 {
		t.Fatal("an irrelevant node update queued a node sync")
	}
	f.c.onNodeUpdate(notExcluded, excluded)
	if f.c.nodeQueue.Len() != 1 {
		t.Fatal("exclusion did not queue a node sync")
	}
}

func TestMetricsLint(t *testing.T) {
	f := newFixture(t, testOptions())
	metricstest.Lint(t, f.registry, "workqueue_")
	for _, name := range []string{"service_controller_loadbalancer_sync_total", "service_controller_nodesync_error_total", "workqueue_adds_total"} {
		if n, err := testutil.GatherAndCount(f.registry, name); err != nil || n == 0 {
			t.Errorf("%s not exported (%d, %v)", name, n, err)
		}
	}
}
