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
		lease("ep-shard-0-of-2", "a", Shard{Index: 0, Count: 2}.LeaseLabels("ep")),
		lease("ep-shard-1-of-2", "", Shard{Index: 1, Count: 2}.LeaseLabels("ep")),  // released
		lease("ep-shard-0-of-4", "c", Shard{Index: 0, Count: 4}.LeaseLabels("ep")), // my layout
		lease("quota-shard-0-of-2", "d", Shard{Index: 0, Count: 2}.LeaseLabels("quota")),
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
	client := fake.NewClientset(lease("ep", "me", Whole.LeaseLabels("ep")), lease("ep-shard-1-of-2", "x", Shard{Index: 1, Count: 2}.LeaseLabels("ep")))
	l := NewLayout(client, LayoutOptions{Binary: "ep", Namespace: "kube-system", BaseLease: "ep", Shard: Whole, LeaseDuration: time.Minute, Recheck: time.Second}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.Start(ctx)
	cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced)
	if b, _ := l.Blockers(time.Now()); len(b) != 1 {
		t.Fatalf("blockers %v, want the 2-shard Lease only", b)
	}
}

// TestLayoutBlocksOnOtherHash: at the same shard count, a shard of the mixed hash is blocked by
// a held Lease of the KEP's hash (labelled as before the choice of hash: no hash label), and a
// shard of the KEP's hash by a held mixed one; neither by its own layout's.
func TestLayoutBlocksOnOtherHash(t *testing.T) {
	fnv0, fnv1 := Shard{Index: 0, Count: 2}, Shard{Index: 1, Count: 2}
	mixed0, mixed1 := Shard{Index: 0, Count: 2, Hash: HashMixed}, Shard{Index: 1, Count: 2, Hash: HashMixed}
	client := fake.NewClientset(
		lease(fnv0.LeaseName("ep"), "a", map[string]string{LabelBinary: "ep", LabelShards: "2", LabelIndex: "0"}),
		lease(mixed1.LeaseName("ep"), "b", mixed1.LeaseLabels("ep")),
	)
	for _, c := range []struct {
		me   Shard
		want string
	}{
		{mixed0, "ep-shard-0-of-2 (2 shards, held by a)"},
		{fnv1, "ep-shard-1-of-2-mixed (2 shards, hash mixed, held by b)"},
	} {
		l := NewLayout(client, LayoutOptions{Binary: "ep", Namespace: "kube-system", BaseLease: "ep", Shard: c.me, LeaseDuration: time.Minute, Recheck: time.Second}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		l.Start(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
			t.Fatal("not synced")
		}
		if b, _ := l.Blockers(time.Now()); len(b) != 1 || b[0] != c.want || l.AllowWrite() {
			t.Errorf("%s hash %s: blockers %v, want [%s]", c.me, c.me.Hash.Name(), b, c.want)
		}
		cancel()
	}
}

// TestLayoutExpiredAtFirstSight: a Lease of another layout listed at start, still naming its
// holder, blocks until renewTime + duration + ClockSkew, not for a whole duration after first
// sight: not at all when that is past (left by an uninstall), the rest of it when it is not;
// with ClockSkew 0 the renewTime is never trusted. A later version of it (the holder renewing
// after all) is a change seen now and blocks a whole duration whatever its renewTime.
func TestLayoutExpiredAtFirstSight(t *testing.T) {
	at := func(name string, renewed time.Duration) *coordinationv1.Lease {
		l := lease(name, "gone", Shard{Index: 0, Count: 2}.LeaseLabels("ep"))
		d := int32(10)
		l.Spec.LeaseDurationSeconds = &d
		r := metav1.NewMicroTime(time.Now().Add(renewed))
		l.Spec.RenewTime = &r
		return l
	}
	for _, tc := range []struct {
		name    string
		renewed time.Duration // renewTime from now
		skew    time.Duration
		blocked bool          // now
		until   time.Duration // from now: blocked before, free after (when blocked)
	}{
		{"expired a minute ago", -70 * time.Second, 10 * time.Second, false, 0},
		{"expired, within the skew", -15 * time.Second, 10 * time.Second, true, 5 * time.Second},
		{"fresh", -time.Second, 10 * time.Second, true, 10 * time.Second},
		{"expired, renewTime not trusted", -70 * time.Second, 0, true, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(at("ep-shard-0-of-2", tc.renewed))
			l := NewLayout(client, LayoutOptions{Binary: "ep", Namespace: "kube-system", BaseLease: "ep", Shard: Shard{Index: 0, Count: 4},
				LeaseDuration: time.Minute, Recheck: time.Second, ClockSkew: tc.skew}, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l.Start(ctx)
			if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
				t.Fatal("not synced")
			}
			// The handler runs after the sync is reported: poll for the first sight.
			var b []string
			for range 100 {
				if l.mu.Lock(); len(l.seen) == 1 {
					l.mu.Unlock()
					break
				}
				l.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
			now := time.Now()
			if b, _ = l.Blockers(now); (len(b) > 0) != tc.blocked {
				t.Fatalf("blockers %v, want blocked %v", b, tc.blocked)
			}
			if !tc.blocked {
				// The holder turns out alive and renews: a change seen now, a whole duration.
				renewed := at("ep-shard-0-of-2", -70*time.Second)
				renewed.ResourceVersion = "2"
				if _, err := client.CoordinationV1().Leases("kube-system").Update(ctx, renewed, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				for range 100 {
					if b, _ = l.Blockers(time.Now()); len(b) == 1 {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
				t.Fatalf("a renewal seen after start does not block: %v", b)
			}
			if b, _ := l.Blockers(now.Add(tc.until - time.Second)); len(b) != 1 {
				t.Errorf("free %s before renewTime + duration + skew (or first sight + duration): %v", time.Second, b)
			}
			if b, _ := l.Blockers(now.Add(tc.until + time.Second)); len(b) != 0 {
				t.Errorf("still blocked %s after: %v", time.Second, b)
			}
		})
	}
}
