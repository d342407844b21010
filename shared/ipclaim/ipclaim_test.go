package ipclaim

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

const manager = "test.kcm-split.io"

func claimOf(addr, parent string) *networkingv1.IPAddress {
	return Object(Name(netip.MustParseAddr(addr)), manager, networkingv1.ParentReference{Resource: "services", Namespace: "ns", Name: parent})
}

// mineFor says a claim is parent's when it carries our label and names parent.
func mineFor(parent string) func(*networkingv1.IPAddress) bool {
	return func(ip *networkingv1.IPAddress) bool {
		_, name, ok := Parent(ip, "services")
		return ManagedBy(ip, manager) && ok && name == parent
	}
}

// withUIDs makes the fake apiserver give every created IPAddress a UID, as a real one does.
func withUIDs(client *fake.Clientset) {
	n := 0
	client.PrependReactor("create", "ipaddresses", func(a clienttesting.Action) (bool, runtime.Object, error) {
		ip := a.(clienttesting.CreateAction).GetObject().(*networkingv1.IPAddress)
		n++
		ip.UID = types.UID(fmt.Sprintf("uid-%d", n))
		return false, nil, nil
	})
}

func TestClaim(t *testing.T) {
	other := claimOf("192.0.2.1", "b")
	other.UID = "uid-b"
	mineBefore := claimOf("192.0.2.2", "a")
	mineBefore.UID = "uid-a"
	foreign := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "192.0.2.3", Labels: map[string]string{networkingv1.LabelManagedBy: "ipallocator.k8s.io"}},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "ns", Name: "a"}}}
	for _, tc := range []struct {
		name        string
		addr        string
		created     bool
		taken       bool
		wantParent  string
		existing    []runtime.Object
		failGet     error
		goneOnRead  bool
		wantErr     error
		wantReadErr bool
	}{
		{name: "free address is created", addr: "192.0.2.9", created: true, wantParent: "a"},
		{name: "claim of another owner is taken", addr: "192.0.2.1", taken: true, wantParent: "b", existing: []runtime.Object{other}},
		{name: "own claim from an earlier try is ours", addr: "192.0.2.2", wantParent: "a", existing: []runtime.Object{mineBefore}},
		{name: "another manager's object naming the same parent is taken", addr: "192.0.2.3", taken: true, wantParent: "a", existing: []runtime.Object{foreign}},
		{name: "claim released between create and read", addr: "192.0.2.1", existing: []runtime.Object{other}, goneOnRead: true, wantErr: ErrVanished},
		{name: "read fails", addr: "192.0.2.1", existing: []runtime.Object{other}, failGet: errors.New("boom"), wantReadErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.existing...)
			if tc.goneOnRead {
				client.PrependReactor("get", "ipaddresses", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "ipaddresses"}, tc.addr)
				})
			}
			if tc.failGet != nil {
				client.PrependReactor("get", "ipaddresses", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.failGet })
			}
			res, err := Claim(context.Background(), client.NetworkingV1().IPAddresses(), claimOf(tc.addr, "a"), mineFor("a"))
			var re *ReadError
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				return
			case tc.wantReadErr:
				if !errors.As(err, &re) || !errors.Is(err, tc.failGet) {
					t.Fatalf("err %v, want a ReadError wrapping %v", err, tc.failGet)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if res.Created != tc.created || res.Taken != tc.taken {
				t.Errorf("created %v taken %v, want %v %v", res.Created, res.Taken, tc.created, tc.taken)
			}
			if res.Object == nil || res.Object.Spec.ParentRef.Name != tc.wantParent {
				t.Errorf("object %+v, want parent %s", res.Object, tc.wantParent)
			}
		})
	}
}

func TestCreateFailureIsReturnedAsIs(t *testing.T) {
	client := fake.NewClientset()
	boom := apierrors.NewForbidden(schema.GroupResource{Resource: "ipaddresses"}, "x", errors.New("no"))
	client.PrependReactor("create", "ipaddresses", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, boom })
	_, err := Claim(context.Background(), client.NetworkingV1().IPAddresses(), claimOf("192.0.2.1", "a"), mineFor("a"))
	var re *ReadError
	if !apierrors.IsForbidden(err) || errors.As(err, &re) || errors.Is(err, ErrVanished) {
		t.Fatalf("err %v, want the create's Forbidden", err)
	}
}

// TestSplitBrainExactlyOneWins races many processes claiming one address: the apiserver's
// create admits exactly one; every other sees the winner's claim as taken.
func TestSplitBrainExactlyOneWins(t *testing.T) {
	client := fake.NewClientset()
	ips := client.NetworkingV1().IPAddresses()
	const racers = 16
	results := make([]Result, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			owner := fmt.Sprintf("svc-%d", i)
			results[i], errs[i] = Claim(context.Background(), ips, claimOf("198.51.100.7", owner), mineFor(owner))
		})
	}
	wg.Wait()
	winners, losers := 0, 0
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		switch {
		case results[i].Created && !results[i].Taken:
			winners++
		case !results[i].Created && results[i].Taken:
			losers++
		default:
			t.Errorf("racer %d: %+v", i, results[i])
		}
	}
	if winners != 1 || losers != racers-1 {
		t.Fatalf("%d winners, %d losers; want exactly one winner", winners, losers)
	}
}

func TestDelete(t *testing.T) {
	for _, tc := range []struct {
		name    string
		uid     types.UID
		exists  bool
		fail    error
		want    Outcome
		wantErr bool
		left    bool
	}{
		{name: "the claim of that UID is deleted", uid: "uid-1", exists: true, want: Deleted},
		{name: "a claim made again (another UID) is left alone", uid: "uid-old", exists: true, want: Replaced, left: true},
		{name: "no claim", uid: "uid-1", want: AlreadyGone},
		{name: "other failure", uid: "uid-1", exists: true, fail: errors.New("boom"), want: Failed, wantErr: true, left: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			withUIDs(client)
			ips := client.NetworkingV1().IPAddresses()
			if tc.exists {
				if _, err := ips.Create(context.Background(), claimOf("192.0.2.1", "a"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// The fake tracker ignores preconditions; do what the apiserver does.
			client.PrependReactor("delete", "ipaddresses", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if tc.fail != nil {
					return true, nil, tc.fail
				}
				d := a.(clienttesting.DeleteAction)
				cur, err := client.Tracker().Get(a.GetResource(), "", d.GetName())
				if err != nil {
					return true, nil, err
				}
				if p := d.GetDeleteOptions().Preconditions; p == nil || p.UID == nil {
					t.Fatal("delete without a UID precondition")
				} else if cur.(*networkingv1.IPAddress).UID != *p.UID {
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "ipaddresses"}, d.GetName(), errors.New("precondition failed"))
				}
				return false, nil, nil
			})
			o, err := Delete(context.Background(), ips, "192.0.2.1", tc.uid)
			if o != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("outcome %v err %v, want %v (error %v)", o, err, tc.want, tc.wantErr)
			}
			_, err = ips.Get(context.Background(), "192.0.2.1", metav1.GetOptions{})
			if left := err == nil; left != tc.left {
				t.Fatalf("claim left %v, want %v", left, tc.left)
			}
		})
	}
}

func TestDeleteIfMine(t *testing.T) {
	client := fake.NewClientset()
	withUIDs(client)
	ips := client.NetworkingV1().IPAddresses()
	for _, a := range []string{"192.0.2.1", "192.0.2.2"} {
		owner := map[string]string{"192.0.2.1": "a", "192.0.2.2": "b"}[a]
		if _, err := ips.Create(context.Background(), claimOf(a, owner), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if o, err := DeleteIfMine(context.Background(), ips, "192.0.2.2", mineFor("a")); o != NotMine || err != nil {
		t.Fatalf("b's claim: %v %v", o, err)
	}
	if o, err := DeleteIfMine(context.Background(), ips, "192.0.2.1", mineFor("a")); o != Deleted || err != nil {
		t.Fatalf("a's claim: %v %v", o, err)
	}
	if o, err := DeleteIfMine(context.Background(), ips, "192.0.2.1", mineFor("a")); o != AlreadyGone || err != nil {
		t.Fatalf("a's claim again: %v %v", o, err)
	}
	var deletes []string
	for _, a := range client.Actions() {
		if d, ok := a.(clienttesting.DeleteAction); ok {
			deletes = append(deletes, d.GetName()+" uid="+string(*d.GetDeleteOptions().Preconditions.UID))
		}
	}
	if !slices.Equal(deletes, []string{"192.0.2.1 uid=uid-1"}) {
		t.Fatalf("deletes %v", deletes)
	}
}

// TestSweepDeletesOnlyVerifiedOrphans: a claim is deleted only when gone says its owner is
// verifiably gone, each on its own UID; an unverifiable owner ends the sweep before any
// later delete.
func TestSweepDeletesOnlyVerifiedOrphans(t *testing.T) {
	type cand struct{ name, owner string }
	owners := map[string]string{ // owner -> state
		"gone":    "gone",
		"alive":   "alive",
		"unknown": "error",
	}
	for _, tc := range []struct {
		name     string
		cands    []cand
		wantDel  []string
		wantDone []string
		wantErr  bool
	}{
		{
			name:     "only verified orphans go",
			cands:    []cand{{"192.0.2.1", "gone"}, {"192.0.2.2", "alive"}, {"192.0.2.3", "gone"}},
			wantDel:  []string{"192.0.2.1", "192.0.2.3"},
			wantDone: []string{"192.0.2.1 deleted", "192.0.2.3 deleted"},
		},
		{
			name:    "an owner that cannot be verified ends the sweep",
			cands:   []cand{{"192.0.2.2", "unknown"}, {"192.0.2.1", "gone"}},
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			withUIDs(client)
			ips := client.NetworkingV1().IPAddresses()
			uids := map[string]types.UID{}
			for _, c := range tc.cands {
				ip, err := ips.Create(context.Background(), claimOf(c.name, c.owner), metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				uids[c.name] = ip.UID
			}
			var done []string
			err := Sweep(context.Background(), ips, tc.cands,
				func(c cand) (string, types.UID) { return c.name, uids[c.name] },
				func(_ context.Context, c cand) (string, bool, error) {
					switch owners[c.owner] {
					case "gone":
						return "owner gone", true, nil
					case "error":
						return "", false, errors.New("cannot verify")
					}
					return "", false, nil
				},
				func(c cand, why string, o Outcome, err error) error {
					done = append(done, c.name+" "+o.String())
					return err
				})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v", err)
			}
			var deleted []string
			for _, a := range client.Actions() {
				if d, ok := a.(clienttesting.DeleteAction); ok {
					if p := d.GetDeleteOptions().Preconditions; p == nil || p.UID == nil || *p.UID != uids[d.GetName()] {
						t.Errorf("delete of %s without its UID as precondition", d.GetName())
					}
					deleted = append(deleted, d.GetName())
				}
			}
			if !slices.Equal(deleted, tc.wantDel) || !slices.Equal(done, tc.wantDone) {
				t.Fatalf("deleted %v done %v, want %v %v", deleted, done, tc.wantDel, tc.wantDone)
			}
		})
	}
}

func TestLabelsAndParent(t *testing.T) {
	ip := claimOf("2001:db8::1", "a")
	if !Selector(manager).Matches(labels.Set(ip.Labels)) || Selector("other").Matches(labels.Set(ip.Labels)) {
		t.Error("selector does not select exactly the manager's claims")
	}
	if ns, name, ok := Parent(ip, "services"); !ok || ns != "ns" || name != "a" {
		t.Errorf("parent %s/%s %v", ns, name, ok)
	}
	if _, _, ok := Parent(ip, "nodes"); ok {
		t.Error("a Service's claim read as a Node's")
	}
	ip.Spec.ParentRef.Group = "example.com"
	if _, _, ok := Parent(ip, "services"); ok {
		t.Error("a parent of another group read as a core Service")
	}
	if got := Name(netip.MustParseAddr("2001:0db8:0:0::1")); got != "2001:db8::1" {
		t.Errorf("name %q, want the canonical form", got)
	}
}
