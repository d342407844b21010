package health

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestChecks(t *testing.T) {
	c := New()
	var leaderErr error
	c.Add("leaderElection", func(*http.Request) error { return leaderErr }, Healthz, Livez)
	c.Add("informerSync", func(*http.Request) error { return errors.New("caches not synced") }, Readyz)
	mux := http.NewServeMux()
	c.Install(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, tc := range []struct {
		name, path string
		setup      func()
		code       int
		contains   string
	}{
		{"healthy", "/healthz", nil, 200, "ok"},
		{"verbose lists checks", "/healthz?verbose", nil, 200, "[+]leaderElection ok"},
		{"not ready names the failed check", "/readyz", nil, 500, "[-]informerSync failed: caches not synced"},
		{"excluded check passes", "/readyz?exclude=informerSync", nil, 200, "ok"},
		{"single check", "/livez/leaderElection", nil, 200, "ok"},
		{"unknown check", "/livez/nope", nil, 404, ""},
		{"watchdog failure", "/livez", func() { leaderErr = errors.New("lease expired") }, 500, "livez check failed: leaderElection"},
		{"watchdog failure single", "/healthz/leaderElection", nil, 500, "lease expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			code, body := get(t, srv, tc.path)
			if code != tc.code || !strings.Contains(body, tc.contains) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tc.path, code, body, tc.code, tc.contains)
			}
		})
	}
}

func TestAddReplaces(t *testing.T) {
	c := New()
	c.Add("x", func(*http.Request) error { return errors.New("bad") }, Readyz)
	c.Add("x", func(*http.Request) error { return nil }, Readyz)
	mux := http.NewServeMux()
	c.Install(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if code, body := get(t, srv, "/readyz"); code != 200 {
		t.Fatalf("readyz = %d %q after replacing the failing check", code, body)
	}
}
