package check

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kcm-split/kcm-split/shared/app/internal/cmdline"
)

// readyzServer answers /readyz with the codes given, one per request, the last one repeated.
func readyzServer(t *testing.T, codes ...int) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		code := codes[min(i, len(codes)-1)]
		w.WriteHeader(code)
		if code != http.StatusOK {
			fmt.Fprintln(w, "[-]controller failed: leading, caches not synced yet")
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func lease(name, holder string, renewed time.Time, seconds int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}}
	if holder != "" {
		l.Spec.HolderIdentity = &holder
	}
	if !renewed.IsZero() {
		l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
	}
	if seconds > 0 {
		l.Spec.LeaseDurationSeconds = &seconds
	}
	return l
}

func TestCheck(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		codes    []int
		leases   []*coordinationv1.Lease
		names    []string
		attempts int
		want     string // in the reason; "" passes
		requests int32  // /readyz requests made
	}{
		{name: "holder present", codes: []int{200}, leases: []*coordinationv1.Lease{lease("c", "pod-a_1", now.Add(-3*time.Second), 15)}, names: []string{"c"}, attempts: 3, requests: 1},
		{name: "holder absent", codes: []int{200}, leases: []*coordinationv1.Lease{lease("c", "", now.Add(-3*time.Second), 15)}, names: []string{"c"}, attempts: 2,
			want: "lease kube-system/c has no holder", requests: 2},
		{name: "expired", codes: []int{200}, leases: []*coordinationv1.Lease{lease("c", "pod-a_1", now.Add(-20*time.Second), 15)}, names: []string{"c"}, attempts: 2,
			want: "lease kube-system/c held by pod-a_1 expired 5s ago", requests: 2},
		{name: "expired within the clock skew", codes: []int{200}, leases: []*coordinationv1.Lease{lease("c", "pod-a_1", now.Add(-16*time.Second), 15)}, names: []string{"c"}, attempts: 1, requests: 1},
		{name: "lease missing", codes: []int{200}, names: []string{"c"}, attempts: 1, want: "lease kube-system/c does not exist", requests: 1},
		{name: "one shard of two without a holder", codes: []int{200},
			leases: []*coordinationv1.Lease{lease("c-shard-0-of-2", "pod-a_1", now, 15), lease("c-shard-1-of-2", "", now, 15)},
			names:  []string{"c-shard-0-of-2", "c-shard-1-of-2"}, attempts: 1, want: "c-shard-1-of-2 has no holder", requests: 1},
		{name: "readyz 503", codes: []int{503}, leases: []*coordinationv1.Lease{lease("c", "pod-a_1", now, 15)}, names: []string{"c"}, attempts: 3,
			want: "503 Service Unavailable: [-]controller failed: leading, caches not synced yet", requests: 3},
		{name: "readyz 503 then 200", codes: []int{503, 200}, leases: []*coordinationv1.Lease{lease("c", "pod-a_1", now, 15)}, names: []string{"c"}, attempts: 3, requests: 2},
		{name: "readyz 403", codes: []int{403}, attempts: 1, want: "403 Forbidden (/readyz is not in the controller's --authorization-always-allow-paths)", requests: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, n := readyzServer(t, tc.codes...)
			client := fake.NewClientset()
			for _, l := range tc.leases {
				if _, err := client.CoordinationV1().Leases(l.Namespace).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			hc, err := httpClient("", "", "")
			if err != nil {
				t.Fatal(err)
			}
			c := &checker{http: hc, client: client, readyzURL: srv.URL + "/readyz", leaseNamespace: "kube-system", leases: tc.names,
				attempts: tc.attempts, skew: 2 * time.Second, now: func() time.Time { return now }, backoff: time.Millisecond}
			var failures []string
			passed, err := c.run(context.Background(), func(attempt int, err error) { failures = append(failures, err.Error()) })
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("failed: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("passed (%s), want a failure with %q", passed, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("reason %q, want %q in it", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("reason is not one line: %q", err)
			}
			if got := n.Load(); got != tc.requests {
				t.Fatalf("%d /readyz requests, want %d (failures: %q)", got, tc.requests, failures)
			}
			for _, name := range tc.names {
				if tc.want == "" && !strings.Contains(passed, "Lease kube-system/"+name+" held by pod-a_1") {
					t.Fatalf("passed without naming the holder of %s: %q", name, passed)
				}
			}
		})
	}
}

// The deadline ends the retries: a check that can never pass stops at --timeout, not after
// every attempt's backoff.
func TestCheckStopsAtTheDeadline(t *testing.T) {
	srv, _ := readyzServer(t, 503)
	hc, err := httpClient("", "", "")
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{http: hc, readyzURL: srv.URL + "/readyz", attempts: 100, now: time.Now, backoff: 50 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.run(ctx, func(int, error) {})
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "out of time") {
		t.Fatalf("err %v, want the 503 and out of time", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s past a 300ms deadline", d)
	}
}

// --readyz-address is dialled instead of the URL's host, which needs no resolving: a Service's
// address from its environment variable (IPv6 unbracketed), as the chart passes it.
func TestCheckReadyzAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Listener = ln
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	var out bytes.Buffer
	code := Run(context.Background(), "test-controller", "dev", []string{"--readyz-url=https://no-such-name.invalid:" + port + "/readyz", "--readyz-address=::1", "--attempts=1"}, &out)
	if code != cmdline.ExitOK {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
}

// The command line: usage errors exit 2 with one line, --help lists the check's own flags.
// (That the controller's --help lists none of them is app's TestHelpLeavesOutTheCheck.)
func TestCheckCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, cmdline.ExitUsage, "nothing to check"},
		{[]string{"--readyz-url=ftp://x/readyz"}, cmdline.ExitUsage, "--readyz-url"},
		{[]string{"--lease=c", "--attempts=0"}, cmdline.ExitUsage, "--attempts"},
		{[]string{"--lease=c", "--no-such-flag"}, cmdline.ExitUsage, "no-such-flag"},
		{[]string{"--help"}, cmdline.ExitOK, "--readyz-url value"},
	} {
		var out bytes.Buffer
		if code := Run(context.Background(), "test-controller", "dev", tc.args, &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("check %v: exit %d, want %d with %q:\n%s", tc.args, code, tc.code, tc.want, out.String())
		}
		if tc.code == cmdline.ExitUsage && strings.Count(strings.TrimSpace(out.String()), "\n") > 0 {
			t.Errorf("check %v: more than one line:\n%s", tc.args, out.String())
		}
	}
}

// With --ca-file the server's certificate is verified: against the URL's host, or
// --tls-server-name; a name the certificate does not hold fails.
func TestCheckCAFile(t *testing.T) {
	srv, _ := readyzServer(t, 200)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--readyz-url=" + srv.URL + "/readyz", "--ca-file=" + ca}, cmdline.ExitOK, "answered 200"},
		{[]string{"--readyz-url=https://example.com:" + port + "/readyz", "--readyz-address=127.0.0.1", "--ca-file=" + ca}, cmdline.ExitOK, "answered 200"},
		{[]string{"--readyz-url=" + srv.URL + "/readyz", "--ca-file=" + ca, "--tls-server-name=not-in-the.cert"}, cmdline.ExitFailure, "certificate"},
		{[]string{"--readyz-url=" + srv.URL + "/readyz", "--ca-file=" + filepath.Join(t.TempDir(), "none")}, cmdline.ExitUsage, "--ca-file"},
	} {
		var out bytes.Buffer
		if code := Run(context.Background(), "test-controller", "dev", append([]string{"--attempts=1"}, tc.args...), &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("check %v: exit %d, want %d with %q:\n%s", tc.args, code, tc.code, tc.want, out.String())
		}
	}
}
