package serving

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

type fakeAuthn map[string]string // token -> user name

func (f fakeAuthn) Authenticate(_ context.Context, token string) (authnv1.UserInfo, bool, error) {
	if token == "boom" {
		return authnv1.UserInfo{}, false, errors.New("apiserver unreachable")
	}
	name, ok := f[token]
	return authnv1.UserInfo{Username: name}, ok, nil
}

// fakeAuthz allows "user verb path" triples.
type fakeAuthz struct {
	allow map[string]bool
	seen  []string
}

func (f *fakeAuthz) Authorize(_ context.Context, u authnv1.UserInfo, verb, path string) (bool, string, error) {
	key := u.Username + " " + verb + " " + path
	f.seen = append(f.seen, key)
	if u.Username == "broken" {
		return false, "", errors.New("review failed")
	}
	return f.allow[key], "no RBAC rule", nil
}

func TestProtect(t *testing.T) {
	authn := fakeAuthn{"t-scraper": "scraper", "t-other": "other", "t-broken": "broken"}
	authz := &fakeAuthz{allow: map[string]bool{"scraper get /metrics": true, "scraper post /metrics": false}}
	var decisions []string
	h := Protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("secret")) }),
		authn, authz, []string{"/healthz", "/debug/open/*"}, func(d string) { decisions = append(decisions, d) })

	for _, tc := range []struct {
		name, method, path, auth string
		code                     int
		decision                 string
	}{
		{"health is open", "GET", "/healthz", "", 200, DecisionAlwaysAllowed},
		{"exact paths only", "GET", "/healthz/leaderElection", "", 401, DecisionNoToken},
		{"prefix entry", "GET", "/debug/open/x", "", 200, DecisionAlwaysAllowed},
		{"no token", "GET", "/metrics", "", 401, DecisionNoToken},
		{"basic auth is no token", "GET", "/metrics", "Basic dTpw", 401, DecisionNoToken},
		{"empty bearer", "GET", "/metrics", "Bearer ", 401, DecisionNoToken},
		{"rejected token", "GET", "/metrics", "Bearer nope", 401, DecisionNoToken},
		{"review unavailable", "GET", "/metrics", "Bearer boom", 503, DecisionError},
		{"authorized", "GET", "/metrics", "Bearer t-scraper", 200, DecisionAllowed},
		{"scheme is case-insensitive", "GET", "/metrics", "bearer t-scraper", 200, DecisionAllowed},
		{"verb is the method", "POST", "/metrics", "Bearer t-scraper", 403, DecisionForbidden},
		{"other user", "GET", "/metrics", "Bearer t-other", 403, DecisionForbidden},
		{"authorization unavailable", "GET", "/metrics", "Bearer t-broken", 503, DecisionError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decisions = nil
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.code {
				t.Errorf("code = %d, want %d (%s)", rec.Code, tc.code, rec.Body.String())
			}
			if served := strings.Contains(rec.Body.String(), "secret"); served != (tc.code == 200) {
				t.Errorf("body served = %v with code %d", served, rec.Code)
			}
			if len(decisions) != 1 || decisions[0] != tc.decision {
				t.Errorf("decisions = %v, want [%s]", decisions, tc.decision)
			}
		})
	}
	if got := authz.seen[len(authz.seen)-3]; got != "scraper post /metrics" {
		t.Errorf("authorized %q, want the lowercase method as verb", got)
	}
}

func TestTTLCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newTTLCache[int](2)
	c.now = func() time.Time { return now }
	c.put("a", 1, time.Second)
	c.put("zero", 9, 0) // a zero TTL caches nothing
	if v, ok := c.get("a"); !ok || v != 1 {
		t.Fatalf("get a = %d %v", v, ok)
	}
	if _, ok := c.get("zero"); ok {
		t.Error("zero TTL was cached")
	}
	now = now.Add(time.Second)
	if _, ok := c.get("a"); ok {
		t.Error("entry outlived its TTL")
	}
	// Full: the expired entry goes first, then everything.
	c.put("b", 2, time.Minute)
	c.put("c", 3, time.Minute)
	if len(c.entries) != 2 {
		t.Fatalf("entries = %d, want 2 (expired a dropped)", len(c.entries))
	}
	c.put("d", 4, time.Minute)
	if len(c.entries) != 1 {
		t.Fatalf("entries = %d, want 1 after a full cache was cleared", len(c.entries))
	}
	if v, ok := c.get("d"); !ok || v != 4 {
		t.Fatalf("get d = %d %v", v, ok)
	}
}

// TestReviewersCache shows that a token and a decision are reviewed once per TTL, that
// rejections expire sooner, and that errors are never cached.
func TestReviewersCache(t *testing.T) {
	client := fake.NewClientset()
	var tokenReviews, accessReviews int
	fail := false
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tokenReviews++
		if fail {
			return true, nil, errors.New("connection refused")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		tr.Status.Authenticated = tr.Spec.Token == "good"
		tr.Status.User = authnv1.UserInfo{Username: "u", Groups: []string{"g"}}
		return true, tr, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		accessReviews++
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		attrs := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "u" && attrs != nil && attrs.Path == "/metrics" && attrs.Verb == "get"
		return true, sar, nil
	})
	ttls := CacheTTLs{Authenticated: time.Minute, Unauthenticated: time.Second, Authorized: time.Minute, Unauthorized: time.Second}
	authn := NewTokenReviewer(client, ttls).(*tokenReviewer)
	authz := NewAccessReviewer(client, ttls).(*accessReviewer)
	now := time.Unix(1000, 0)
	authn.cache.now = func() time.Time { return now }
	authz.cache.now = func() time.Time { return now }
	ctx := context.Background()

	for range 3 {
		if u, ok, err := authn.Authenticate(ctx, "good"); err != nil || !ok || u.Username != "u" {
			t.Fatalf("good token = %v %v %v", u, ok, err)
		}
		if _, ok, _ := authn.Authenticate(ctx, "bad"); ok {
			t.Fatal("bad token accepted")
		}
		if ok, _, err := authz.Authorize(ctx, authnv1.UserInfo{Username: "u"}, "get", "/metrics"); err != nil || !ok {
			t.Fatalf("allowed = %v %v", ok, err)
		}
		if ok, _, _ := authz.Authorize(ctx, authnv1.UserInfo{Username: "u"}, "get", "/debug/pprof/"); ok {
			t.Fatal("pprof allowed")
		}
	}
	if tokenReviews != 2 || accessReviews != 2 {
		t.Fatalf("reviews = %d token, %d access; want 2 and 2 (one per distinct question)", tokenReviews, accessReviews)
	}
	now = now.Add(2 * time.Second) // rejections and denials expired, acceptances not
	_, _, _ = authn.Authenticate(ctx, "good")
	_, _, _ = authn.Authenticate(ctx, "bad")
	_, _, _ = authz.Authorize(ctx, authnv1.UserInfo{Username: "u"}, "get", "/metrics")
	_, _, _ = authz.Authorize(ctx, authnv1.UserInfo{Username: "u"}, "get", "/debug/pprof/")
	if tokenReviews != 3 || accessReviews != 3 {
		t.Fatalf("after 2s: reviews = %d token, %d access; want 3 and 3", tokenReviews, accessReviews)
	}
	fail = true
	for range 2 {
		if _, _, err := authn.Authenticate(ctx, "new"); err == nil {
			t.Fatal("a failed review returned no error")
		}
	}
	if tokenReviews != 5 {
		t.Fatalf("failed reviews = %d, want 2: errors must not be cached", tokenReviews-3)
	}
}
