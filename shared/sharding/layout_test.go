package sharding

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func lease(name, holder string, labels map[string]string) *coordinationv1.Lease {
	d := int32(1)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, Labels: labels, ResourceVersion: "1"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d},
	}
}

// TestLayoutBlocksOnOtherLayouts: a shard of 4 is blocked by held Leases of 2 shards and by
// the unlabelled unsharded Lease, not by its own layout's nor by other binaries' nor by
// released ones, and a held Lease stops blocking a lease duration after its last change.
func TestLayoutBlocksOnOtherLayouts(t *testing.T) {
	me := Shard{Index: 1, Count: 4}
	client := fake.NewClientset(
		lease("ep-shard-0-of-2", "a", Shard{0, 2}.LeaseLabels("ep")),
		lease("ep-shard-1-of-2", "", Shard{1, 2}.LeaseLabels("ep")),  // released
		lease("ep-shard-0-of-4", "c", Shard{0, 4}.LeaseLabels("ep")), // my layout
		lease("quota-shard-0-of-2", "d", Shard{0, 2}.LeaseLabels("quota")),
		lease("ep", "e", nil), // the unsharded Lease
		lease("other", "f", nil),
	)
	l := NewLayout(client, LayoutOptions{Binary: "ep", Namespace: "kube-system", BaseLease: "ep", Shard: me, LeaseDuration: time.Second, Recheck: 50 * time.Millisecond}, nil)
	if l.AllowWrite() {
		t.Fatal("writes allowed before the Leases were listed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.Start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
		t.Fatal("not synced")
	}
	b, _ := l.Blockers(time.Now())
	if len(b) != 2 || l.AllowWrite() {
		t.Fatalf("blockers %v, want ep-shard-0-of-2 and ep", b)
	}
	// Nobody renews them: a lease duration (1s) later they are expired, and Wait returns.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	start := time.Now()
	if err := l.Wait(wctx); err != nil {
		t.Fatalf("still blocked: %v", err)
	}
	if waited := time.Since(start); waited < 500*time.Millisecond {
		t.Errorf("Wait returned after %s, before the Leases could expire", waited)
	}
}

func TestUnshardedLayoutIsBlockedBySharded(t *testing.T) {
	client := fake.NewClientset(lease("ep", "me", Whole.LeaseLabels("ep")), lease("ep-shard-1-of-2", "x", Shard{1, 2}.LeaseLabels("ep")))
	l := NewLayout(client, LayoutOptions{Binary: "ep", Namespace: "kube-system", BaseLease: "ep", Shard: Whole, LeaseDuration: time.Minute, Recheck: time.Second}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.Start(ctx)
	cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced)
	if b, _ := l.Blockers(time.Now()); len(b) != 1 {
		t.Fatalf("blockers %v, want the 2-shard Lease only", b)
	}
}
