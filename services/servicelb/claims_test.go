package servicelb

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kcm-split/kcm-split/services/servicelb/allocation"
	"github.com/kcm-split/kcm-split/shared/worker"
)

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
	f.c.state.Restore([]allocation.RestoredService{{Key: testNS + "/web", Props: allocation.PropsOf(lb("web")), Addrs: []netip.Addr{netipAddr("192.0.2.10")}}}, nil,
		func(_ string, _ netip.Addr, err error) { t.Fatal(err) })
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
	if got := f.c.state.Assigned(testNS + "/web"); len(got) != 1 || got[0].String() != "192.0.2.15" {
		t.Fatalf("web holds %v here", got)
	}
	if f.claim("192.0.2.10") != nil {
		t.Fatal("our abandoned claim is still there")
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
