package app

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// blockingSink holds every write until release is closed, and counts the writes it got.
type blockingSink struct {
	release chan struct{}
	got     atomic.Int32
}

func (s *blockingSink) write() (*corev1.Event, error) {
	s.got.Add(1)
	<-s.release
	return &corev1.Event{}, nil
}
func (s *blockingSink) Create(*corev1.Event) (*corev1.Event, error)        { return s.write() }
func (s *blockingSink) Update(*corev1.Event) (*corev1.Event, error)        { return s.write() }
func (s *blockingSink) Patch(*corev1.Event, []byte) (*corev1.Event, error) { return s.write() }

func TestTermSinkCloseWaitsForWritesInFlight(t *testing.T) {
	inner := &blockingSink{release: make(chan struct{})}
	s := &termSink{sink: inner}
	wrote := make(chan error, 3)
	go func() { _, err := s.Create(&corev1.Event{}); wrote <- err }()
	go func() { _, err := s.Patch(&corev1.Event{}, nil); wrote <- err }()
	for inner.got.Load() < 2 {
		time.Sleep(time.Millisecond)
	}

	closed := make(chan bool)
	go func() { closed <- s.close(time.Minute) }()
	for !s.isClosed() {
		time.Sleep(time.Millisecond)
	}
	// A write after close is refused without reaching the apiserver, while close still waits.
	refused := make(chan error, 1)
	go func() { _, err := s.Update(&corev1.Event{}); refused <- err }()
	select {
	case err := <-refused:
		if !errors.Is(err, errTermOver) {
			t.Errorf("Update after close: err %v, want errTermOver", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Update after close reached the sink (it blocks there)")
	}
	select {
	case <-closed:
		t.Fatal("close returned while two writes were in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(inner.release)
	if !<-closed {
		t.Fatal("close reported writes still in flight after they ended")
	}
	for range 2 {
		if err := <-wrote; err != nil {
			t.Errorf("a write in flight at close failed: %v", err)
		}
	}
	if n := inner.got.Load(); n != 2 {
		t.Errorf("the sink got %d writes, want the 2 in flight at close", n)
	}
	if _, err := s.Create(&corev1.Event{}); !errors.Is(err, errTermOver) {
		t.Errorf("Create after close: err %v, want errTermOver", err)
	}
	if n := inner.got.Load(); n != 2 {
		t.Errorf("a write after close reached the sink (%d writes)", n)
	}
}

func (s *termSink) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func TestTermSinkCloseIsBounded(t *testing.T) {
	inner := &blockingSink{release: make(chan struct{})}
	defer close(inner.release)
	s := &termSink{sink: inner}
	go func() { _, _ = s.Create(&corev1.Event{}) }()
	for inner.got.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	if s.close(20 * time.Millisecond) {
		t.Fatal("close reported no write in flight while one was blocked")
	}
}
