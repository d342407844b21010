package servicelb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

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
