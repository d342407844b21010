package informer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func pod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
}

// A handler's registration is synced only once it has been given every listed object, and
// Run stops the informers it started once run returns.
func TestHandlersAndRun(t *testing.T) {
	client := fake.NewClientset(pod("a"), pod("b"), pod("c"))
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(DropManagedFields))
	pods := factory.Core().V1().Pods().Informer()
	var seen atomic.Int32
	var hs Handlers
	hs.Add(pods, cache.ResourceEventHandlerFuncs{AddFunc: func(any) { seen.Add(1) }})
	hs.AddWithResync(pods, cache.ResourceEventHandlerFuncs{}, time.Hour)
	if hs.HasSynced() {
		t.Fatal("HasSynced before the informer started")
	}
	if len(hs.Synced()) != 2 || hs.Err() != nil {
		t.Fatalf("Synced() has %d checks, Err() = %v; want 2 and nil", len(hs.Synced()), hs.Err())
	}

	var runCtx context.Context
	err := Run(context.Background(), func(ctx context.Context) error {
		runCtx = ctx
		if !cache.WaitForCacheSync(ctx.Done(), hs.Synced()...) {
			return errors.New("never synced")
		}
		if !hs.HasSynced() || seen.Load() != 3 {
			return errors.New("synced before the handler saw every pod")
		}
		obj, ok, err := pods.GetStore().GetByKey("ns/a")
		if err != nil || !ok || obj.(*v1.Pod).ManagedFields != nil {
			return errors.New("cached pod keeps its managed fields")
		}
		return errors.New("done")
	}, factory)
	if err == nil || err.Error() != "done" {
		t.Fatalf("Run = %v, want run's own error", err)
	}
	if runCtx.Err() == nil {
		t.Error("run's context is still live after Run returned")
	}
	if !pods.IsStopped() {
		t.Error("the informer still runs after Run returned")
	}

	// The informer is stopped now: a late registration fails, and the set stays unsynced.
	hs.Add(pods, cache.ResourceEventHandlerFuncs{})
	if hs.Err() == nil || hs.HasSynced() {
		t.Errorf("after a failed registration: Err() = %v, HasSynced() = %v; want an error and false", hs.Err(), hs.HasSynced())
	}
}

func TestTrack(t *testing.T) {
	var hs Handlers
	var ready atomic.Bool
	hs.Track(ready.Load, nil)
	hs.Track(nil, nil)
	if hs.HasSynced() || len(hs.Synced()) != 1 {
		t.Fatalf("HasSynced() = %v with %d checks, want false with 1", hs.HasSynced(), len(hs.Synced()))
	}
	ready.Store(true)
	if !hs.HasSynced() {
		t.Fatal("HasSynced() = false once every check passes")
	}
	boom := errors.New("index exists")
	hs.Track(nil, boom)
	if !errors.Is(hs.Err(), boom) || hs.HasSynced() {
		t.Errorf("Err() = %v, HasSynced() = %v; want %v and false", hs.Err(), hs.HasSynced(), boom)
	}
}

// Run ends run's context when the outer one ends.
func TestRunFollowsCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	factory.Core().V1().Nodes().Informer()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil }, factory) }()
	cancel()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-done:
			return true, err
		default:
			return false, nil
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// RunWhenSynced runs run only once every registration has synced, refuses a failed
// registration without running run, and ends quietly when ctx ends before the caches sync.
func TestRunWhenSynced(t *testing.T) {
	client := fake.NewClientset(pod("a"), pod("b"))
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	var seen atomic.Int32
	var hs Handlers
	hs.Add(pods, cache.ResourceEventHandlerFuncs{AddFunc: func(any) { seen.Add(1) }})
	err := Run(context.Background(), func(ctx context.Context) error {
		return hs.RunWhenSynced(ctx, "test controller", func(context.Context) error {
			if n := seen.Load(); n != 2 {
				return fmt.Errorf("run before the handler saw every pod: saw %d", n)
			}
			return errors.New("ran")
		}, "workers", 1)
	}, factory)
	if err == nil || err.Error() != "ran" {
		t.Fatalf("RunWhenSynced = %v; want run's own error", err)
	}

	// Never started: the caches never sync, and an ended ctx ends the wait without error.
	var idle Handlers
	idle.Add(informers.NewSharedInformerFactory(client, 0).Core().V1().Pods().Informer(), cache.ResourceEventHandlerFuncs{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := idle.RunWhenSynced(ctx, "test controller", func(context.Context) error { return errors.New("ran unsynced") }); err != nil {
		t.Fatalf("RunWhenSynced with ctx ended before sync = %v; want nil", err)
	}

	var failed Handlers
	failed.Track(nil, errors.New("no such informer"))
	if err := failed.RunWhenSynced(context.Background(), "test controller", func(context.Context) error { return errors.New("ran") }); err == nil || !strings.Contains(err.Error(), "no such informer") {
		t.Fatalf("RunWhenSynced after a failed registration = %v; want the registration's error", err)
	}
}

// WaitSynced returns once the registrations have been given every listed object and the
// tracked steps pass, without waiting for a 100 ms poll; it returns false when ctx ends first.
func TestWaitSynced(t *testing.T) {
	client := fake.NewClientset(pod("a"), pod("b"))
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	var seen atomic.Int32
	var hs Handlers
	hs.Add(pods, cache.ResourceEventHandlerFuncs{AddFunc: func(any) { seen.Add(1) }})
	var step atomic.Bool
	// lastUnpassed is when the step was last asked and had not passed (Unix nanoseconds).
	var lastUnpassed atomic.Int64
	hs.Track(func() bool {
		if step.Load() {
			return true
		}
		lastUnpassed.Store(time.Now().UnixNano())
		return false
	}, nil)

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if hs.WaitSynced(short) {
		t.Fatal("WaitSynced = true before the informer started")
	}

	ctx, stop := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	defer func() { stop(); factory.Shutdown() }()
	// The registration syncs; the tracked step still holds the wait.
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		t.Fatal("the informer never synced")
	}
	// measure waits once with the step unpassed, passes it and returns how long after the last
	// ask that found it unpassed WaitSynced returned, and how long after it passed.
	measure := func() (lag, sincePass time.Duration) {
		step.Store(false)
		done := make(chan time.Time, 1)
		go func() {
			if hs.WaitSynced(ctx) {
				done <- time.Now()
			}
			close(done)
		}()
		select {
		case <-done:
			t.Fatal("WaitSynced returned while a tracked step had not passed")
		case <-time.After(10 * time.Millisecond):
		}
		passed := time.Now()
		step.Store(true)
		at, ok := <-done
		if !ok {
			t.Fatal("WaitSynced = false once everything synced")
		}
		if seen.Load() != 2 {
			t.Errorf("the handler saw %d Pods when WaitSynced returned, want 2", seen.Load())
		}
		return at.Sub(time.Unix(0, lastUnpassed.Load())), at.Sub(passed)
	}
	// The tracked step is polled every 5 ms; client-go's wait polls every 100 ms, and would
	// return about 90 ms after the step passed here. Measured from the last ask that found the
	// step unpassed, a 100 ms poll is never under 100 ms, whatever the load; load only makes a
	// right answer slower, so the fastest of up to five tries is asserted.
	fastest := time.Duration(math.MaxInt64)
	for try := 1; try <= 5 && fastest >= 60*time.Millisecond; try++ {
		lag, sincePass := measure()
		t.Logf("try %d: WaitSynced returned %v after the last ask that found the step unpassed, %v after it passed", try, lag, sincePass)
		fastest = min(fastest, lag)
	}
	if fastest >= 60*time.Millisecond {
		t.Errorf("WaitSynced returned at best %v after the last ask that found the step unpassed, want well under client-go's 100 ms poll", fastest)
	}
}
