package servicelb

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
)

// Rule 1: an address the pools cannot vouch for is kept, reserved and reported, never cleared.
func TestUnverifiableAddressIsKept(t *testing.T) {
	cases := []struct {
		name  string
		svc   []svcOpt
		fault func(f *fixture)
	}{
		{"pool API not served", nil, func(f *fixture) { f.c.SetPoolAPIServed(poolsource.KCMSplit.Name, false) }},
		{"pool cache not synced", nil, func(f *fixture) { f.poolsSynced = false }},
		{"pool deleted", nil, func(f *fixture) { f.deletePool("p") }},
		{"pool invalid", nil, func(f *fixture) {
			f.pool("p", []string{"192.0.2.9-192.0.2.1"}, func(p *v1alpha1.IPAddressPool) { p.Generation = 2 })
		}},
		{"named pool deleted", []svcOpt{withAnnotation(poolsource.AnnotationAddressPool, "p")}, func(f *fixture) { f.deletePool("p") }},
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
			if got := f.c.state.Holders(netipAddr("192.0.2.1")); !slices.Equal(got, []string{testNS + "/web"}) {
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
		{"requested address changed", func(s *v1.Service) {
			s.Annotations = map[string]string{poolsource.AnnotationLoadBalancerIPs: "192.0.2.7"}
		}, ReasonAddressReassigned, "asks for 192.0.2.7", []string{"patch web/status"}},
		{"named pool changed", func(s *v1.Service) { s.Annotations = map[string]string{poolsource.AnnotationAddressPool: "q"} }, ReasonAddressReassigned, "asks for pool q", []string{"patch web/status"}},
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
	if held := f.c.state.Holding(); len(held) != 0 {
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

func TestSharedAddressInController(t *testing.T) {
	key := withAnnotation(poolsource.AnnotationAllowSharedIP, "k")
	f := newFixture(t, testOptions(), lb("a", key, withPorts(80)), lb("b", key, withPorts(443)), lb("c", key, withPorts(80)),
		lb("local", key, withPorts(8080), func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }))
	f.pool("p", []string{"192.0.2.1-192.0.2.4"})
	f.c.restore(context.Background())
	got := map[string]string{}
	for _, n := range []string{"a", "b", "c", "local"} {
		if err := f.sync(n); err != nil {
			t.Fatal(err)
		}
		got[n] = strings.Join(ips(f.stored(n)), ",")
	}
	if got["a"] != got["b"] || got["a"] == got["c"] || got["local"] == got["a"] || got["local"] == got["c"] {
		t.Fatalf("addresses %v: want a and b shared, c (same port as a) and local (other policy) apart", got)
	}
	// A port change that conflicts moves the Service off the shared address.
	b := f.stored("b")
	b.Spec.Ports = []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}}
	f.cache(b)
	if err := f.sync("b"); err != nil {
		t.Fatal(err)
	}
	if now := strings.Join(ips(f.stored("b")), ","); now == got["a"] || now == got["c"] {
		t.Fatalf("b now on %s, shared with a Service on the same port", now)
	}
}
