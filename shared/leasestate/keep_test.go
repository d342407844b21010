package leasestate

import (
	"context"
	"sync"
	"testing"
	"time"
)

// The loop reads before it writes, retries a failed read, writes again on each wake, and
// stops with its context.
func TestKeeperReadsBeforeWriting(t *testing.T) {
	var (
		mu           sync.Mutex
		loaded       bool
		loads, saves int
		savedUnread  bool
	)
	wake := make(chan struct{})
	saved := make(chan struct{}, 10)
	k := Keeper{
		Loaded: func() bool { mu.Lock(); defer mu.Unlock(); return loaded },
		Load: func(context.Context) bool {
			mu.Lock()
			defer mu.Unlock()
			loads++
			loaded = loads >= 2 // the first read fails
			return loaded
		},
		Save: func(context.Context) bool {
			mu.Lock()
			savedUnread = savedUnread || !loaded
			saves++
			mu.Unlock()
			saved <- struct{}{}
			return true
		},
		Wake:  wake,
		Retry: time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()
	<-saved // after the retried read
	wake <- struct{}{}
	<-saved
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	if loads != 2 || saves != 2 || savedUnread {
		t.Fatalf("loads %d (want 2: one failed, one retried), saves %d (want 2: after the read, after the wake), a save before a read: %v", loads, saves, savedUnread)
	}
}
