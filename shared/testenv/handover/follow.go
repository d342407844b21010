package handover

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// PodLog follows one Pod's log from the moment Follow is called (a Pod's log goes with the Pod,
// so an end-to-end test starts following before it deletes one).
type PodLog struct {
	Pod    string
	mu     sync.Mutex
	buf    bytes.Buffer
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// Follow starts following the log of ns/pod's first container, from a second back.
func Follow(ctx context.Context, cs kubernetes.Interface, ns, pod string) *PodLog {
	ctx, cancel := context.WithCancel(ctx)
	l := &PodLog{Pod: pod, done: make(chan struct{}), cancel: cancel}
	since := int64(1)
	go func() {
		defer close(l.done)
		rc, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Follow: true, SinceSeconds: &since}).Stream(ctx)
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			return
		}
		defer rc.Close()
		b := make([]byte, 32<<10)
		for {
			n, err := rc.Read(b)
			l.mu.Lock()
			l.buf.Write(b[:n])
			l.mu.Unlock()
			if err != nil {
				if err != io.EOF && ctx.Err() == nil {
					l.mu.Lock()
					l.err = err
					l.mu.Unlock()
				}
				return
			}
		}
	}()
	return l
}

// Times reads what the log holds so far (see Read).
func (l *PodLog) Times(from time.Time) Times {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Read(bytes.NewReader(l.buf.Bytes()), from)
}

// Err is why the stream failed, if it did.
func (l *PodLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// WaitEnd waits up to timeout for the stream to end (the container exited), then stops it.
func (l *PodLog) WaitEnd(timeout time.Duration) {
	select {
	case <-l.done:
	case <-time.After(timeout):
	}
	l.Stop()
}

// Stop ends the stream and waits for its goroutine.
func (l *PodLog) Stop() {
	l.cancel()
	<-l.done
}

// Collect reads one handover from the old leader's log and its standbys' (the one that logged
// leading after from is the new leader): it waits up to timeout for the old log to end and for
// a standby's sync, then stops every stream.
func Collect(old *PodLog, standbys []*PodLog, from time.Time, timeout time.Duration) Phases {
	deadline := time.Now().Add(timeout)
	old.WaitEnd(time.Until(deadline))
	p := Phases{Old: old.Times(from)}
	for time.Now().Before(deadline) && p.New.Synced.IsZero() {
		for _, s := range standbys {
			if t := s.Times(from); !t.StartedLeading.IsZero() {
				p.New = t
			}
		}
		if p.New.Synced.IsZero() {
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, s := range standbys {
		s.Stop()
	}
	return p
}
