package leader

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestFenceRefusesWritesUnlessLeading drives the transport with a plain HTTP server: reads
// always pass, writes pass only while this process leads with a fresh renewal.
func TestFenceRefusesWritesUnlessLeading(t *testing.T) {
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
	}))
	defer srv.Close()
	cfg := lossConfig()
	e, err := New(cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: e.Fence(http.DefaultTransport)}
	do := func(method string) error {
		req, _ := http.NewRequest(method, srv.URL, strings.NewReader("{}"))
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	// Standing by: reads pass, writes are refused and counted.
	if err := do(http.MethodGet); err != nil {
		t.Fatalf("GET while standing by: %v", err)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if err := do(m); !IsFenced(err) {
			t.Fatalf("%s while standing by = %v, want a FencedError", m, err)
		}
	}
	if got := served.Load(); got != 1 {
		t.Fatalf("server saw %d requests, want only the GET", got)
	}
	if got := testutil.ToFloat64(e.fenced.WithLabelValues(reasonNotLeading)); got != 4 {
		t.Fatalf("fenced{not_leading} = %v, want 4", got)
	}

	// Leading with a fresh renewal: writes pass.
	ended := make(chan struct{})
	e.beginTerm(func() { close(ended) })
	e.renewed(time.Now())
	if err := do(http.MethodPatch); err != nil {
		t.Fatalf("PATCH while leading: %v", err)
	}
	// The last renewal older than the renew deadline (a frozen or partitioned leader): the
	// write is refused and the term ends.
	e.mu.Lock()
	e.renewedAt = time.Now().Add(-cfg.RenewDeadline)
	e.mu.Unlock()
	if err := do(http.MethodPatch); !IsFenced(err) {
		t.Fatalf("PATCH with a stale renewal = %v, want a FencedError", err)
	}
	select {
	case <-ended:
	case <-time.After(time.Second):
		t.Fatal("a stale renewal did not end the term")
	}
	if got := testutil.ToFloat64(e.fenced.WithLabelValues(reasonStale)); got != 1 {
		t.Fatalf("fenced{renewal_stale} = %v, want 1", got)
	}
	if got := served.Load(); got != 2 {
		t.Fatalf("server saw %d requests, want the GET and one PATCH", got)
	}

	// Election off: nothing is fenced.
	off, _ := New(Config{Enabled: false, Name: "off"}, nil, nil)
	if err := off.AllowWrite(); err != nil {
		t.Fatalf("election off fenced a write: %v", err)
	}
}

// cuttable fails every request once cut, as a frozen or partitioned process would look from
// the apiserver: its Lease stops being renewed.
type cuttable struct {
	next http.RoundTripper
	cut  atomic.Bool
}

func (c *cuttable) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("cut off")
	}
	return c.next.RoundTrip(r)
}

// TestTakeoverAtExpiry: the leader stops renewing (a crash). The standby must take over once
// the Lease has gone unrenewed for its duration as the standby saw it, never earlier; the
// delay past that point is reported. Retry period 3 s: client-go alone adds up to 3.6 s.
func TestTakeoverAtExpiry(t *testing.T) {
	testenv.Require(t, env)
	cfg := func(id string) Config {
		return Config{Enabled: true, Namespace: "kube-system", Name: "expiry", Identity: id,
			LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 3 * time.Second}
	}
	cut := &cuttable{}
	rc := rest.CopyConfig(env.Config)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { cut.next = rt; return cut })
	ac, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg("a"), ac, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aLeading := make(chan struct{})
	go func() {
		_ = a.Run(ctx, func(ctx context.Context) error { close(aLeading); <-ctx.Done(); return nil })
	}()
	select {
	case <-aLeading:
	case <-time.After(10 * time.Second):
		t.Fatal("a never led")
	}
	b := startCandidate(t, cfg("b"))
	time.Sleep(4 * time.Second) // b watches a renew
	client := env.Client(t)
	cut.cut.Store(true)
	time.Sleep(500 * time.Millisecond) // a renewal in flight lands
	lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "expiry", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// a's last renewal as stored; b may take over only a lease duration after it.
	lastRenew := lease.Spec.RenewTime.Time
	waitLeading(t, b, 20*time.Second)
	took := time.Now()
	lease, err = client.CoordinationV1().Leases("kube-system").Get(ctx, "expiry", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := *lease.Spec.HolderIdentity; h != "b" {
		t.Fatalf("holder = %q, want b", h)
	}
	if took.Before(lastRenew.Add(6 * time.Second)) {
		t.Fatalf("b took over at %s, before a's Lease (renewed %s) expired", took.Format(time.StampMilli), lastRenew.Format(time.StampMilli))
	}
	t.Logf("takeover %s after a's last stored renewal (lease duration 6s, retry period 3s)", took.Sub(lastRenew).Round(time.Millisecond))
	if err := a.AllowWrite(); !IsFenced(err) {
		t.Fatalf("cut-off leader's AllowWrite = %v, want a FencedError", err)
	}
}

// TestFenceAlso: a further condition refuses writes under its own reason once the Lease checks
// pass, without ending the Lease's term; the Lease's own reasons come first.
func TestFenceAlso(t *testing.T) {
	e, err := New(lossConfig(), nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var member atomic.Bool
	e.FenceAlso(ReasonMigrationNotMember, member.Load)
	if err := e.AllowWrite(); !IsFenced(err) || !strings.Contains(err.Error(), reasonNotLeading) {
		t.Fatalf("standing by: %v, want fenced for %s", err, reasonNotLeading)
	}
	ended := make(chan struct{})
	e.beginTerm(func() { close(ended) })
	e.renewed(time.Now())
	if err := e.AllowWrite(); !IsFenced(err) || !strings.Contains(err.Error(), ReasonMigrationNotMember) {
		t.Fatalf("leading, not a member: %v, want fenced for %s", err, ReasonMigrationNotMember)
	}
	select {
	case <-ended:
		t.Fatal("the further condition ended the Lease's term")
	default:
	}
	member.Store(true)
	if err := e.AllowWrite(); err != nil {
		t.Fatalf("leading, a member: %v", err)
	}
	if got := testutil.ToFloat64(e.fenced.WithLabelValues(ReasonMigrationNotMember)); got != 1 {
		t.Fatalf("fenced{%s} = %v, want 1", ReasonMigrationNotMember, got)
	}
}
