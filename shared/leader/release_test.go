package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// TestReleaseOutcome: a release the apiserver refuses (the Role gone with a helm uninstall) is
// reported as not released, with the refusal; one that lands is reported released. The log
// line at shutdown says which.
func TestReleaseOutcome(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse bool
	}{{"refused", true}, {"landed", false}} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(&coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l"},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr("me")},
			})
			if tc.refuse {
				client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "l", errors.New("no RBAC"))
				})
			}
			lock := &interruptibleLock{Interface: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "l"},
				Client:     client.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: "me"},
			}}
			ctx := context.Background()
			if _, _, err := lock.Get(ctx); err != nil {
				t.Fatal(err)
			}
			if released, err := lock.releaseOutcome(); released || err != nil {
				t.Fatalf("before any release: released=%v err=%v", released, err)
			}
			err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: ""})
			released, relErr := lock.releaseOutcome()
			if tc.refuse {
				if released || !apierrors.IsForbidden(relErr) || !apierrors.IsForbidden(err) {
					t.Fatalf("refused release: released=%v outcome err=%v update err=%v", released, relErr, err)
				}
				return
			}
			if !released || relErr != nil || err != nil {
				t.Fatalf("release: released=%v outcome err=%v update err=%v", released, relErr, err)
			}
			got, _ := client.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
			if h := got.Spec.HolderIdentity; h != nil && *h != "" {
				t.Fatalf("Lease still held by %q after a release reported as landed", *h)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestRenewalCountsFromItsStamp: a renewal whose renewTime was stamped before the write left
// (the process froze in between) extends the term from the stamp, not from the send: the
// fence then refuses writes a renew deadline after the renewTime others read.
func TestRenewalCountsFromItsStamp(t *testing.T) {
	client := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr("me")},
	})
	e := &Elector{}
	lock := &interruptibleLock{elector: e, Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "l"},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "me"},
	}}
	ctx := context.Background()
	if _, _, err := lock.Get(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stamp time.Duration // renewTime relative to the send
		want  time.Duration // renewedAt relative to the send, within a second
	}{{"stamped 20s before the send", -20 * time.Second, -20 * time.Second}, {"stamped at the send", 0, 0}} {
		before := time.Now()
		if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me", RenewTime: metav1.NewTime(before.Add(tc.stamp))}); err != nil {
			t.Fatal(err)
		}
		e.mu.Lock()
		got := e.renewedAt.Sub(before)
		e.renewedAt = time.Time{}
		e.mu.Unlock()
		if d := got - tc.want; d < -time.Second || d > time.Second {
			t.Errorf("%s: renewedAt %s from the send, want %s", tc.name, got, tc.want)
		}
	}
}
