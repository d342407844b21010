package kube

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Contact records when the apiserver last answered a request of this process (any HTTP
// status counts: an answer proves it is reachable), so /readyz can say when it is not.
type Contact struct {
	mu   sync.Mutex
	last time.Time
}

// NewContact returns a Contact that counts the process start as the last contact.
func NewContact() *Contact { return &Contact{last: time.Now()} }

// Wrap records every answer that comes back through rt. Install it with rest.Config.Wrap.
func (c *Contact) Wrap(rt http.RoundTripper) http.RoundTripper {
	return contactTransport{next: rt, c: c}
}

// Since is how long ago the apiserver last answered.
func (c *Contact) Since() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.last)
}

func (c *Contact) touch() {
	c.mu.Lock()
	c.last = time.Now()
	c.mu.Unlock()
}

type contactTransport struct {
	next http.RoundTripper
	c    *Contact
}

func (t contactTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil {
		t.c.touch()
	}
	return resp, err
}

// Probe asks the apiserver's /livez through client every period while nothing else has
// answered for that long, so Contact stays current even in a process that only watches (a
// controller without leader election sends nothing else for minutes). It stops with ctx.
func (c *Contact) Probe(ctx context.Context, client rest.Interface, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.Since() < period {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, period)
		// Any answer, even an error status, counts; the transport has recorded it.
		_ = client.Get().AbsPath("/livez").Do(pctx).Error()
		cancel()
	}
}

// Check fails once the apiserver has not answered for longer than after.
func (c *Contact) Check(after time.Duration) func(*http.Request) error {
	return func(*http.Request) error {
		if d := c.Since(); d > after {
			return fmt.Errorf("kube-apiserver unreachable: no answer for %s", d.Round(time.Second))
		}
		return nil
	}
}
