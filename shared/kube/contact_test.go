package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestContactTracksAnswersAndProbesWhenIdle(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			// Hijack and close: no HTTP answer at all, as an unreachable apiserver.
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		w.WriteHeader(http.StatusForbidden) // any answer proves reachability
	}))
	defer srv.Close()
	c := NewContact()
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(c.Wrap)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A window of 20 probes: a stall of the machine (-race, a busy CI) as long as most of it
	// still passes while the server answers; each probe waits at most its period.
	const window, probe = 2 * time.Second, 100 * time.Millisecond
	go c.Probe(ctx, client.Discovery().RESTClient(), probe)

	check := c.Check(window)
	// Past the window: without the probes' answers, the start would be too long ago by now.
	time.Sleep(window + window/4)
	if err := check(nil); err != nil {
		t.Fatalf("reachable apiserver (answering 403) reported as %v", err)
	}
	up.Store(false)
	deadline := time.Now().Add(window + 8*time.Second)
	for check(nil) == nil {
		if time.Now().After(deadline) {
			t.Fatal("unreachable apiserver still passes the check")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := check(nil); !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("check error = %v", err)
	}
	up.Store(true)
	deadline = time.Now().Add(5 * time.Second)
	for check(nil) != nil {
		if time.Now().After(deadline) {
			t.Fatal("apiserver back, check still fails")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
