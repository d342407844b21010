package leader

import (
	"context"
	"errors"
	"testing"

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
