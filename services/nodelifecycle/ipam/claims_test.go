package ipam

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
)

// claimObject is a claim as another allocator would have made it.
func claimObject(r string, node, nodeUID string) *networkingv1.IPAddress {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: types.UID(nodeUID)}}
	ip := newClaimObject(mustPrefix(r), n)
	ip.UID = types.UID("claim-" + r)
	return ip
}

// claimsInAPI is the claims the apiserver holds: range -> Node.
func (f *fixture) claimsInAPI() map[string]string {
	f.t.Helper()
	list, err := f.client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for i := range list.Items {
		cl, ok := claimFrom(&list.Items[i])
		if !ok {
			f.t.Fatalf("IPAddress %s is not a well-formed claim: %+v", list.Items[i].Name, list.Items[i])
		}
		out[cl.r.String()] = cl.node
	}
	return out
}

// claimWrites are the writes of claims: "create <name>", "delete <name> uid=<precondition>".
func (f *fixture) claimWrites() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource != "ipaddresses" {
			continue
		}
		switch a := a.(type) {
		case clienttesting.CreateAction:
			out = append(out, "create "+a.GetObject().(*networkingv1.IPAddress).Name)
		case clienttesting.DeleteAction:
			uid := "none"
			if p := a.GetDeleteOptions().Preconditions; p != nil && p.UID != nil {
				uid = string(*p.UID)
			}
			out = append(out, "delete "+a.GetName()+" uid="+uid)
		}
	}
	return out
}

func TestClaimIsAValidIPAddressNamedByTheNetworkAddress(t *testing.T) {
	n := node("a")
	for r, name := range map[string]string{"10.0.4.0/24": "10.0.4.0", "fd00:0:0:10::/64": "fd00:0:0:10::", "2001:db8:0:0:1::/80": "2001:db8:0:0:1::"} {
		ip := newClaimObject(mustPrefix(r), n)
		if ip.Name != name {
			t.Errorf("claim of %s named %q, want the canonical %q", r, ip.Name, name)
		}
		cl, ok := claimFrom(ip)
		if !ok || !cl.is("a", "uid-a", mustPrefix(r)) {
			t.Errorf("claim of %s reads back as %+v, %v", r, cl, ok)
		}
		if p := ip.Spec.ParentRef; p.Group != "" || p.Resource != "nodes" || p.Name != "a" {
			t.Errorf("parentRef %+v", p)
		}
	}
	// An IPAddress of the Service allocator is not a claim.
	svc := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.0.4.0", Labels: map[string]string{networkingv1.LabelManagedBy: "ipallocator.k8s.io"}},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "x"}}}
	if _, ok := claimFrom(svc); ok {
		t.Error("a Service's IPAddress read as a claim")
	}
}

func TestRangeClaimedElsewhereIsPassedOverAndKeptUntilItsNodeIsVerifiedGone(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/16"})
	// Another allocator claimed the first range for a Node this process has not seen: its
	// claim is in the apiserver, not yet in this process's informer.
	if _, err := f.client.NetworkingV1().IPAddresses().Create(context.Background(), claimObject("10.0.0.0/24", "elsewhere", "uid-elsewhere"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.add(node("a"))
	f.mustSync("a")
	if got := f.cidrs("a"); !slices.Equal(got, []string{"10.0.1.0/24"}) {
		t.Fatalf("a got %v, want the next range: 10.0.0.0/24 is claimed by another allocator", got)
	}
	if got := f.claimsInAPI(); got["10.0.1.0/24"] != "a" || got["10.0.0.0/24"] != "elsewhere" {
		t.Fatalf("claims %v", got)
	}
	if v := testutil.ToFloat64(f.c.metrics.claimCollisions); v != 1 {
		t.Errorf("claim collisions %v, want 1", v)
	}
	set := f.c.families[0].set
	if !set.Held(mustPrefix("10.0.0.0/24")) {
		t.Fatal("the range claimed elsewhere is not held")
	}
	// A claim whose Node does not exist (checked live) is released, and its range with it.
	f.mustSync("elsewhere")
	if got := f.claimsInAPI(); len(got) != 1 || got["10.0.1.0/24"] != "a" {
		t.Fatalf("claims %v, want only a's", got)
	}
	if w := f.claimWrites(); !slices.Contains(w, "delete 10.0.0.0 uid=claim-10.0.0.0/24") {
		t.Fatalf("claim writes %v: the release must carry the claim's UID as precondition", w)
	}
	if set.Held(mustPrefix("10.0.0.0/24")) {
		t.Fatal("10.0.0.0/24 still held after its claim was released")
	}
}

func TestClaimIsReleasedOnlyWhenTheNodeIsVerifiedGone(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/16"})
	f.add(node("a"))
	f.mustSync("a")
	if got := f.claimsInAPI(); got["10.0.0.0/24"] != "a" {
		t.Fatalf("claims %v", got)
	}
	set := f.c.families[0].set

	// The cache lost the Node (a missed event, a relist in progress) but the apiserver has
	// it: the claim stays, and so does the range.
	if err := f.nodes.Delete(node("a")); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("a"); err != nil {
		t.Fatal(err)
	}
	if got := f.claimsInAPI(); got["10.0.0.0/24"] != "a" {
		t.Fatalf("claim released on a cache miss: %v", got)
	}
	if !set.Held(mustPrefix("10.0.0.0/24")) {
		t.Fatal("range freed on a cache miss while its claim stands")
	}

	// A Node of the same name with another UID: the claim's Node is gone.
	again := node("a")
	again.UID = "uid-a-again"
	if _, err := f.client.CoreV1().Nodes().Update(context.Background(), again, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("a"); err != nil {
		t.Fatal(err)
	}
	if got := f.claimsInAPI(); len(got) != 0 {
		t.Fatalf("claims %v after the Node was replaced", got)
	}
	if set.Held(mustPrefix("10.0.0.0/24")) {
		t.Fatal("range still held after its claim was released")
	}
}

func TestStaleNodeWriteIsReReadAndWrittenAgain(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "10.0.0.0/16"})
	f.add(node("a"))
	// The first write finds the Node changed (a status update): 409.
	conflicts := 1
	f.client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		cur := node("a")
		cur.ResourceVersion = "8"
		if err := f.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("nodes"), cur, ""); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "a", nil)
	})
	f.mustSync("a")
	if got := f.cidrs("a"); !slices.Equal(got, []string{"10.0.0.0/24"}) {
		t.Fatalf("a got %v", got)
	}
	var rvs []string
	for _, p := range f.patches() {
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(p[2:]), &body); err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, body.Metadata.ResourceVersion)
	}
	if !slices.Equal(rvs, []string{"7", "8"}) {
		t.Fatalf("patches conditioned on %v, want the cached version 7, then the re-read 8", rvs)
	}
	if w := f.claimWrites(); !slices.Equal(w, []string{"create 10.0.0.0"}) {
		t.Fatalf("claim writes %v, want one create: the retry reuses the claim", w)
	}
}

func TestNodeReplacedBeforeTheWriteGetsNothingAndTheClaimGoes(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "192.0.2.0/31", MaskSize: 31})
	f.add(node("a"))
	// Between the cache's view and the write, a is deleted and registered again: the
	// resourceVersion no longer matches (409), and the live Node has another UID.
	f.client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		again := node("a")
		again.UID, again.ResourceVersion = "uid-a-again", "9"
		if err := f.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("nodes"), again, ""); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "a", nil)
	})
	if err := f.sync("a"); err != nil {
		t.Fatal(err)
	}
	if got := f.cidrs("a"); len(got) != 0 {
		t.Fatalf("the new a got %v from a write meant for the old one", got)
	}
	if got := f.claimsInAPI(); len(got) != 0 {
		t.Fatalf("claims %v: the old a's claim must go once it is verified replaced", got)
	}
	if used := f.c.families[0].set.Used(); used != 0 {
		t.Fatalf("%d ranges used", used)
	}
}

func TestRebuildAccountsForClaims(t *testing.T) {
	f := newFixture(t, Options{ClusterCIDR: "192.0.2.0/29", MaskSize: 31},
		// has: a Node with its range, and its claim.
		node("has", "192.0.2.0/31"), claimObject("192.0.2.0/31", "has", "uid-has"),
		// pending: claimed before a restart, not written yet.
		node("pending"), claimObject("192.0.2.2/31", "pending", "uid-pending"),
		// ghost: a claim whose Node is gone.
		claimObject("192.0.2.4/31", "ghost", "uid-ghost"),
	)
	if evs := f.events(); len(evs) != 0 {
		t.Fatalf("events %v: a Node's own claim is no conflict", evs)
	}
	set := f.c.families[0].set
	if set.Used() != 3 {
		t.Fatalf("%d ranges used after the rebuild, want 3 (has, pending, ghost)", set.Used())
	}
	// A new Node gets the one range nobody claims.
	f.add(node("new"))
	f.mustSync("new")
	if got := f.cidrs("new"); !slices.Equal(got, []string{"192.0.2.6/31"}) {
		t.Fatalf("new got %v", got)
	}
	// pending gets the range claimed for it, without a new claim.
	f.mustSync("pending")
	if got := f.cidrs("pending"); !slices.Equal(got, []string{"192.0.2.2/31"}) {
		t.Fatalf("pending got %v, want its claimed 192.0.2.2/31", got)
	}
	// ghost's claim goes once its Node is verified gone; its range is free again.
	f.mustSync("ghost")
	if got := f.claimsInAPI(); got["192.0.2.4/31"] != "" {
		t.Fatalf("ghost's claim kept: %v", got)
	}
	if set.Held(mustPrefix("192.0.2.4/31")) {
		t.Fatal("ghost's range still held")
	}
	if w := f.claimWrites(); !slices.Equal(w, []string{"create 192.0.2.6", "delete 192.0.2.4 uid=claim-192.0.2.4/31"}) {
		t.Fatalf("claim writes %v", w)
	}
}
