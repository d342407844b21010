package app

import (
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// errTermOver is what an Event write gets once its term's broadcaster has shut down.
var errTermOver = errors.New("event not written: the term that recorded it has ended")

// termSink is the event sink of one term. client-go's broadcaster writes Events from a
// goroutine of its own, and its Shutdown does not wait for a write in flight. Such a write
// could reach the apiserver after this process released its Lease, which the next holder may
// take at once: a write of ours inside its term. close waits for the writes in flight, and
// refuses every later one, before the term's Lease can be released.
type termSink struct {
	sink record.EventSink

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
}

func (s *termSink) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *termSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if !s.begin() {
		return nil, errTermOver
	}
	defer s.inflight.Done()
	return s.sink.Create(e)
}

func (s *termSink) Update(e *corev1.Event) (*corev1.Event, error) {
	if !s.begin() {
		return nil, errTermOver
	}
	defer s.inflight.Done()
	return s.sink.Update(e)
}

func (s *termSink) Patch(old *corev1.Event, data []byte) (*corev1.Event, error) {
	if !s.begin() {
		return nil, errTermOver
	}
	defer s.inflight.Done()
	return s.sink.Patch(old, data)
}

// close refuses every later write and waits up to timeout for those in flight; it reports
// whether they all ended.
func (s *termSink) close(timeout time.Duration) bool {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}
