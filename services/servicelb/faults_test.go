package servicelb

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/shared/worker"
)

// countReason counts the events with reason.
func countReason(evs []string, reason string) int {
	n := 0
	for _, e := range evs {
		if strings.Contains(e, " "+reason+" ") {
			n++
		}
	}
	return n
}

// Rule 1: an address the pools cannot vouch for is kept, reserved and reported, never cleared.
func TestUnverifiableAddressIsKept(t *testing.T) {
	cases := []struct {
		name  string
		svc   []svcOpt
		fault func(f *fixture)
	}{
		{"pool API not served", nil, func(f *fixture) { f.c.SetPoolAPIServed(false) }},
		{"pool cache not synced", nil, func(f *fixture) { f.poolsSynced = false }},
		{"pool deleted", nil, func(f *fixture) { f.deletePool("p") }},
		{"pool invalid", nil, func(f *fixture) {
			f.pool("p", []string{"192.0.2.9-192.0.2.1"}, func(p *v1alpha1.IPAddressPool) { p.Generation = 2 })
		}},
		{"named pool deleted", []svcOpt{withAnnotation(AnnotationAddressPool, "p")}, func(f *fixture) { f.deletePool("p") }},
		{"every pool deleted, another pool appears", nil, func(f *fixture) {
			f.deletePool("p")
			f.pool("q", []string{"198.51.100.0/24"})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			web := lb("web", append([]svcOpt{withFinalizer(), withIngress("192.0.2.1")}, tc.svc...)...)
			f := newFixture(t, testOptions(), web)
			f.pool("p", []string{"192.0.2.0/24"})
			f.c.restore(context.Background())
			if err := f.sync("web"); err != nil {
				t.Fatal(err)
			}
			f.events()
			tc.fault(f)
			for i := range 3 {
				if err := f.sync("web"); err != nil {
					t.Fatalf("sync %d: %v", i, err)
				}
				if w := f.writes(); len(w) != 0 {
					t.Fatalf("sync %d wrote %v to a Service whose address cannot be verified", i, w)
				}
				evs := f.events()
				if want := map[bool]int{true: 1, false: 0}[i == 0]; countReason(evs, ReasonAddressUnverified) != want {
					t.Fatalf("sync %d: events %v, want %d %s (once per episode)", i, evs, want, ReasonAddressUnverified)
				}
			}
			if got := ips(f.stored("web")); !slices.Equal(got, []string{"192.0.2.1"}) {
				t.Fatalf("status = %v", got)
			}
			if got := f.c.state.alloc.Holders(netipAddr("192.0.2.1")); !slices.Equal(got, []string{testNS + "/web"}) {
				t.Fatalf("holders of the kept address = %v", got)
			}
			if v := gaugeSum(f.c.metrics.unverified); v != 1 {
				t.Fatalf("unverified gauge = %v", v)
			}
		})
	}
}

// The kept address stays reserved: a pool covering it again never hands it to another Service.
func TestUnverifiedAddressIsNotHandedOut(t *testing.T) {
	f := newFixture(t, testOptions(), lb("web", withFinalizer(), withIngress("192.0.2.1")), lb("other"))
	f.pool("p", []string{"192.0.2.1-192.0.2.2"})
	f.c.restore(context.Background())
	f.deletePool("p")
	if err := f.sync("web"); err != nil || len(f.writes()) != 0 {
		t.Fatalf("web: %v %v", err, f.writes())
	}
	f.pool("p2", []string{"192.0.2.1-192.0.2.2"})
	if err := f.sync("other"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("other")); !slices.Equal(got, []string{"192.0.2.2"}) {
		t.Fatalf("other got %v, want 192.0.2.2 (192.0.2.1 is web's)", got)
	}
	// web is verified again: the episode ends and the gauge drops.
	if err := f.sync("web"); err != nil || len(f.writes()) != 0 {
		t.Fatalf("web: %v %v", err, f.writes())
	}
	if v := gaugeSum(f.c.metrics.unverified); v != 0 {
		t.Fatalf("unverified gauge = %v", v)
	}
}

// Rule 1, the other side: a verified reason releases, with an Event naming it.
func TestVerifiedReleaseNamesTheReason(t *testing.T) {
	cases := []struct {
		name   string
		change func(*v1.Service)
		reason string // event reason
		text   string // in its message
		writes []string
	}{
		{"type changed", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeClusterIP }, ReasonAddressReleased, "type is now ClusterIP", []string{"patch web/status", "patch web"}},
		{"class changed", func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") }, ReasonAddressReleased, `loadBalancerClass is now "example.com/other"`, []string{"patch web/status", "patch web"}},
		{"requested address changed", func(s *v1.Service) { s.Annotations = map[string]string{AnnotationLoadBalancerIPs: "192.0.2.7"} }, ReasonAddressReassigned, "asks for 192.0.2.7", []string{"patch web/status"}},
		{"named pool changed", func(s *v1.Service) { s.Annotations = map[string]string{AnnotationAddressPool: "q"} }, ReasonAddressReassigned, "asks for pool q", []string{"patch web/status"}},
		{"deleted", func(s *v1.Service) { s.DeletionTimestamp = ptr.To(metav1.Now()) }, ReasonAddressReleased, "being deleted", []string{"patch web"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			web := lb("web", withFinalizer(), withIngress("192.0.2.1"))
			f := newFixture(t, testOptions(), web)
			f.pool("p", []string{"192.0.2.0/28"})
			f.pool("q", []string{"198.51.100.0/28"})
			f.c.restore(context.Background())
			if err := f.sync("web"); err != nil { // claims 192.0.2.1
				t.Fatal(err)
			}
			if f.claim("192.0.2.1") == nil {
				t.Fatal("no claim for the held address")
			}
			f.events()
			changed := web.DeepCopy()
			tc.change(changed)
			changed.ResourceVersion = "2"
			f.cache(changed)
			if err := f.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("services"), changed, testNS); err != nil {
				t.Fatal(err)
			}
			if err := f.sync("web"); err != nil {
				t.Fatal(err)
			}
			if got := f.writes(); !slices.Equal(got, tc.writes) {
				t.Fatalf("writes %v, want %v", got, tc.writes)
			}
			evs := strings.Join(f.events(), "\n")
			if !strings.Contains(evs, tc.reason) || !strings.Contains(evs, tc.text) {
				t.Fatalf("events:\n%s\nwant %s naming %q", evs, tc.reason, tc.text)
			}
			if f.claim("192.0.2.1") != nil {
				t.Fatal("the claim of the released address is still there")
			}
		})
	}
}

// Rule 2: an address claimed by another Service (another process) is never shown; the
// Service gets another one, claimed for it.
func TestClaimTakenChoosesAnotherAddress(t *testing.T) {
	f := newFixture(t, testOptions(), lb("web"))
	f.pool("p", []string{"192.0.2.10-192.0.2.20"})
	f.c.restore(context.Background())
	// Another process claimed .10 for its Service; our cache has not seen the claim yet.
	if _, err := f.client.NetworkingV1().IPAddresses().Create(context.Background(), newClaim(lb("theirs"), netipAddr("192.0.2.10"), "p"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := f.c.syncService(context.Background(), testNS+"/web"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("web")); !slices.Equal(got, []string{"192.0.2.11"}) {
		t.Fatalf("web got %v, want 192.0.2.11 (.10 is claimed by another Service)", got)
	}
	if got := f.claimWrites(); !slices.Equal(got, []string{"create 192.0.2.10", "create 192.0.2.11"}) {
		t.Fatalf("claim writes %v", got)
	}
	if c := f.claim("192.0.2.11"); c == nil || claimParent(c) != testNS+"/web" || c.Labels[networkingv1.LabelManagedBy] != ClaimManagedBy {
		t.Fatalf("claim of .11: %+v", c)
	}
	if c := f.claim("192.0.2.10"); claimParent(c) != testNS+"/theirs" {
		t.Fatalf("the other Service's claim was changed: %+v", c)
	}
	if v := testutil.ToFloat64(f.c.metrics.claimConflicts); v != 1 {
		t.Fatalf("claim conflicts = %v", v)
	}
}

// An address every candidate claim turns out to be taken: bounded attempts, then a retry
// with backoff, nothing shown and nothing left claimed.
func TestClaimAttemptsAreBounded(t *testing.T) {
	f := newFixture(t, testOptions(), lb("web"))
	f.pool("p", []string{"192.0.2.0/28"})
	f.c.restore(context.Background())
	f.client.PrependReactor("create", "ipaddresses", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Group: "networking.k8s.io", Resource: "ipaddresses"}, "x")
	})
	f.client.PrependReactor("get", "ipaddresses", func(a clienttesting.Action) (bool, runtime.Object, error) {
		name := a.(clienttesting.GetAction).GetName()
		c := newClaim(lb("theirs-"+strings.ReplaceAll(name, ".", "-")), netipAddr(name), "p")
		return true, c, nil
	})
	err := f.sync("web")
	var rq *worker.Requeue
	if err == nil || errors.As(err, &rq) {
		t.Fatalf("err = %v, want a plain error (retried with backoff)", err)
	}
	creates := 0
	for _, w := range f.claimWrites() {
		if strings.HasPrefix(w, "create") {
			creates++
		}
	}
	if creates != maxClaimAttempts {
		t.Fatalf("%d claim attempts, want %d", creates, maxClaimAttempts)
	}
	if w := f.writes(); slices.Contains(w, "patch web/status") {
		t.Fatalf("status written although no claim succeeded: %v", w)
	}
}

// Rule 2: the status write is conditioned on the resourceVersion; a conflict rolls back the
// choice and its claim.
func TestStatusConflictRollsBack(t *testing.T) {
	f := newFixture(t, testOptions(), lb("web", withFinalizer()))
	f.pool("p", []string{"192.0.2.10-192.0.2.20"})
	f.c.restore(context.Background())
	var patch string
	f.client.PrependReactor("patch", "services", func(a clienttesting.Action) (bool, runtime.Object, error) {
		pa := a.(clienttesting.PatchAction)
		if pa.GetSubresource() != "status" {
			return false, nil, nil
		}
		patch = string(pa.GetPatch())
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "services"}, "web", errors.New("the object has been modified"))
	})
	if err := f.sync("web"); err == nil {
		t.Fatal("no error after a conflict")
	}
	if !strings.Contains(patch, `"resourceVersion":"1"`) {
		t.Fatalf("status patch %s carries no resourceVersion precondition", patch)
	}
	if held := f.c.state.alloc.Keys(); len(held) != 0 {
		t.Fatalf("allocator still holds %v after the failed write", held)
	}
	// The claim is the Service's, not this process's: another process may be showing that
	// address now, so a failed write never deletes it.
	if c := f.claim("192.0.2.10"); c == nil || claimParent(c) != testNS+"/web" {
		t.Fatalf("claim after the failed write: %+v", c)
	}
	if v := testutil.ToFloat64(f.c.metrics.conflicts.WithLabelValues(conflictStale)); v != 1 {
		t.Fatalf("stale conflicts = %v", v)
	}
	// The next sync takes the Service's claimed address again.
	f.client.ReactionChain = f.client.ReactionChain[1:]
	if err := f.sync("web"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("web")); !slices.Equal(got, []string{"192.0.2.10"}) {
		t.Fatalf("web = %v", got)
	}
}

// A claim in a cache that is behind is not trusted for an address about to be shown: the
// claim may have been deleted and made again for another Service meanwhile.
func TestStaleCachedClaimIsNotTrustedForANewAddress(t *testing.T) {
	f := newFixture(t, testOptions(), lb("web", withFinalizer()))
	f.pool("p", []string{"192.0.2.10-192.0.2.20"})
	f.c.restore(context.Background())
	ctx := context.Background()
	// The cache still shows web's old claim of .10; the API server has another Service's.
	if err := f.claims.Add(newClaim(lb("web"), netipAddr("192.0.2.10"), "p")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.NetworkingV1().IPAddresses().Create(ctx, newClaim(lb("theirs"), netipAddr("192.0.2.10"), "p"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := f.c.syncService(ctx, testNS+"/web"); err != nil {
		t.Fatal(err)
	}
	if got := ips(f.stored("web")); !slices.Equal(got, []string{"192.0.2.11"}) {
		t.Fatalf("web = %v, want 192.0.2.11 (.10 is claimed by another Service)", got)
	}
}

// A second process wrote (and claimed) another address for the Service: it is taken over,
// not fought over, and our own unpublished choice is released with its claim.
func TestAddressClaimedAndShownByAnotherProcessIsAdopted(t *testing.T) {
	f := newFixture(t, testOptions(), lb("web", withFinalizer()))
	f.pool("p", []string{"192.0.2.10-192.0.2.20"})
	f.c.restore(context.Background())
	// Our choice, claimed but not shown yet (the status write is still to come).
	if err := f.c.state.alloc.Claim(testNS+"/web", netipAddr("192.0.2.10"), propsOf(lb("web"))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.NetworkingV1().IPAddresses().Create(context.Background(), newClaim(lb("web"), netipAddr("192.0.2.10"), "p"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The other process's result: .15 claimed for web and shown.
	theirs := lb("web", withFinalizer(), withIngress("192.0.2.15"))
	theirs.ResourceVersion = "2"
	if _, err := f.client.NetworkingV1().IPAddresses().Create(context.Background(), newClaim(theirs, netipAddr("192.0.2.15"), "p"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("services"), theirs, testNS); err != nil {
		t.Fatal(err)
	}
	f.cache(theirs)
	if err := f.sync("web"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("writes %v: the other process's address was fought over", w)
	}
	if got := f.c.state.alloc.Assigned(testNS + "/web"); len(got) != 1 || got[0].String() != "192.0.2.15" {
		t.Fatalf("web holds %v here", got)
	}
	if f.claim("192.0.2.10") != nil {
		t.Fatal("our abandoned claim is still there")
	}
}

// Rule 3: a status someone else keeps changing is restored with exponential backoff, capped,
// then slowly; one Event per episode; every restoring write counted.
func TestOverwrittenStatusBacksOff(t *testing.T) {
	f := newFixture(t, testOptions(), lb("web", withFinalizer()))
	f.pool("p", []string{"192.0.2.10-192.0.2.20"})
	f.c.restore(context.Background())
	now := time.Unix(1000, 0)
	f.c.now = func() time.Time { return now }
	if err := f.sync("web"); err != nil {
		t.Fatal(err)
	}
	f.events()
	rv := 1
	overwrite := func() {
		rv++
		s := f.stored("web")
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "203.0.113.9"}}
		s.ResourceVersion = strings.Repeat("9", rv) // a new version each time
		if err := f.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("services"), s, testNS); err != nil {
			t.Fatal(err)
		}
		f.cache(s)
	}
	// The other writer overwrites at once after every write of ours; we sync every second
	// for ten minutes (the queue would bring the key back by the update and RequeueAfter).
	var writesAt []time.Duration
	start := now
	events := 0
	for now.Sub(start) < 10*time.Minute {
		if got := ips(f.stored("web")); !slices.Equal(got, []string{"203.0.113.9"}) {
			overwrite()
		}
		err := f.sync("web")
		var rq *worker.Requeue
		if err != nil && !errors.As(err, &rq) {
			t.Fatal(err)
		}
		if slices.Contains(f.writes(), "patch web/status") {
			writesAt = append(writesAt, now.Sub(start))
		}
		events += countReason(f.events(), ReasonStatusOverwritten)
		now = now.Add(time.Second)
	}
	t.Logf("restoring writes at %v", writesAt)
	if events != 1 {
		t.Fatalf("%d %s events, want 1 per episode", events, ReasonStatusOverwritten)
	}
	perMinute := 0
	for _, w := range writesAt {
		if w < time.Minute {
			perMinute++
		}
	}
	if perMinute > 4 {
		t.Fatalf("%d restoring writes in the first minute, want at most 4", perMinute)
	}
	// After the cap: one write per overwriteSlow.
	late := 0
	for _, w := range writesAt {
		if w >= 5*time.Minute {
			late++
		}
	}
	if late > 1 {
		t.Fatalf("%d writes in the last 5 minutes, want at most 1 (slow path)", late)
	}
	if v := testutil.ToFloat64(f.c.metrics.conflicts.WithLabelValues(conflictOverwritten)); int(v) != len(writesAt) {
		t.Fatalf("overwritten counter %v, restoring writes %d", v, len(writesAt))
	}
	// Quiet for longer than overwriteQuiet: a new overwrite is a new episode, with its Event.
	now = now.Add(overwriteQuiet + time.Minute)
	_ = f.sync("web") // restores, the other writer has stopped
	overwrite()
	_ = f.sync("web")
	if n := countReason(f.events(), ReasonStatusOverwritten); n != 1 {
		t.Fatalf("%d events for a new episode, want 1", n)
	}
}

// Pool status conflicts go through the queue's backoff, not a fixed 200 ms requeue.
func TestPoolStatusConflictBacksOff(t *testing.T) {
	f := newFixture(t, testOptions(), lb("a"))
	f.pool("good", []string{"192.0.2.0/30"})
	f.c.restore(context.Background())
	f.dyn.PrependReactor("update", "ipaddresspools", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(v1alpha1.GroupVersionResource.GroupResource(), "good", errors.New("modified"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	attempts := 0
	f.c.poolQueue.Add("good")
	go func() { <-ctx.Done(); f.c.poolQueue.ShutDown() }()
	for f.c.poolQueue.ProcessNext(ctx, func(ctx context.Context, key string) error {
		attempts++
		return f.c.syncPoolStatus(ctx, key)
	}) {
	}
	// 200 ms doubling: attempts at 0, 0.2, 0.6, 1.4 s within 2 s (a fixed 200 ms would make 10).
	if attempts > 5 {
		t.Fatalf("%d pool status attempts in 2 s", attempts)
	}
	if v := testutil.ToFloat64(f.c.metrics.conflicts.WithLabelValues(conflictPoolStatus)); v != float64(attempts) {
		t.Fatalf("pool status conflicts %v, attempts %d", v, attempts)
	}
}

// Orphan claims are deleted only when a live read confirms the Service is gone.
func TestSweepDeletesOnlyVerifiedOrphans(t *testing.T) {
	live := lb("live", withFinalizer(), withIngress("192.0.2.2"))
	f := newFixture(t, testOptions())
	if _, err := f.client.CoreV1().Services(testNS).Create(context.Background(), live, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	old := metav1.NewTime(time.Now().Add(-2 * claimGrace))
	for _, c := range []*networkingv1.IPAddress{
		newClaim(lb("gone"), netipAddr("192.0.2.1"), "p"),
		newClaim(live, netipAddr("192.0.2.2"), "p"), // live, but not in the cache: a cache miss
		newClaim(lb("young-gone"), netipAddr("192.0.2.3"), "p"),
	} {
		if c.Name != "192.0.2.3" {
			c.CreationTimestamp = old
		} else {
			c.CreationTimestamp = metav1.Now()
		}
		if _, err := f.client.NetworkingV1().IPAddresses().Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.claimsCatchUp()
	f.c.sweepClaims(context.Background())
	if f.claim("192.0.2.1") != nil {
		t.Fatal("the claim of a Service that is gone was kept")
	}
	if f.claim("192.0.2.2") == nil {
		t.Fatal("the claim of a live Service was deleted on a cache miss")
	}
	if f.claim("192.0.2.3") == nil {
		t.Fatal("a claim younger than the grace period was deleted")
	}
	if n := countReason(f.events(), ReasonClaimReleased); n != 1 {
		t.Fatalf("%d %s events, want 1", n, ReasonClaimReleased)
	}
}

// The pool API is looked for again and again, with backoff: one that appears after the start
// is picked up, and one that goes away is noticed.
func TestWatchPoolAPI(t *testing.T) {
	dc := &switchDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	changes := make(chan bool, 4)
	go watchPoolAPI(ctx, dc, false, func(b bool) { changes <- b })
	time.Sleep(1500 * time.Millisecond)
	dc.served.Store(true)
	if b := waitChange(ctx, changes); b == nil || !*b {
		t.Fatalf("the pool API appearing was not noticed: %v", b)
	}
	dc.served.Store(false)
	if b := waitChange(ctx, changes); b == nil || *b {
		t.Fatalf("the pool API going away was not noticed: %v", b)
	}
}

func waitChange(ctx context.Context, ch <-chan bool) *bool {
	select {
	case b := <-ch:
		return &b
	case <-ctx.Done():
		return nil
	}
}

// switchDiscovery serves the pool API while served is true.
type switchDiscovery struct {
	*fakediscovery.FakeDiscovery
	served atomic.Bool
}

func (d *switchDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if !d.served.Load() || gv != v1alpha1.GroupVersionResource.GroupVersion().String() {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
	}
	return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: v1alpha1.Resource}}}, nil
}

func netipAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func (f *fixture) deletePool(name string) {
	f.t.Helper()
	o, ok, _ := f.pools.GetByKey(name)
	if !ok {
		f.t.Fatalf("no pool %s", name)
	}
	if err := f.pools.Delete(o); err != nil {
		f.t.Fatal(err)
	}
	f.c.refreshPools()
}
