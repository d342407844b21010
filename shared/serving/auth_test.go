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

// testClock is a clock a test moves by hand.
type testClock struct{ now time.Time }

func (c *testClock) Now() time.Time { return c.now }

func TestReviewCache(t *testing.T) {
	clk := &testClock{now: time.Unix(1000, 0)}
	c := newReviewCache[int](2, clk)
	c.put("a", 1, time.Second)
	c.put("zero", 9, 0) // a zero TTL caches nothing
	if v, ok := c.get("a"); !ok || v != 1 {
		t.Fatalf("get a = %d %v", v, ok)
	}
	if _, ok := c.get("zero"); ok {
		t.Error("zero TTL was cached")
	}
	clk.now = clk.now.Add(time.Second + time.Nanosecond)
	if _, ok := c.get("a"); ok {
		t.Error("entry outlived its TTL")
	}

	// Full: only the least recently used entry goes, and a read counts as a use.
	c.put("b", 2, time.Minute)
	c.put("c", 3, time.Minute)
	if v, ok := c.get("b"); !ok || v != 2 {
		t.Fatalf("get b = %d %v", v, ok)
	}
	c.put("d", 4, time.Minute) // c is the least recently used now
	if _, ok := c.get("c"); ok {
		t.Error("c survived: the least recently used entry was not the one evicted")
	}
	// In this order, so that d is the most recently used when "short" comes in below.
	for _, kv := range []struct {
		k    string
		want int
	}{{"b", 2}, {"d", 4}} {
		k, want := kv.k, kv.want
		if v, ok := c.get(k); !ok || v != want {
			t.Errorf("get %s = %d %v after one eviction; want %d: only one entry may go", k, v, ok, want)
		}
	}
	// Each entry keeps its own TTL.
	c.put("short", 5, 10*time.Second)
	clk.now = clk.now.Add(11 * time.Second)
	if _, ok := c.get("short"); ok {
		t.Error("short outlived its 10s TTL")
	}
	if _, ok := c.get("d"); !ok {
		t.Error("d (1m TTL) expired after 11s")
	}
}

// TestReviewersKeepRecentCallersWhenFull: a full cache costs one review for the newcomer and
// one for the caller it evicted, never a review for everyone.
func TestReviewersKeepRecentCallersWhenFull(t *testing.T) {
	client := fake.NewClientset()
	reviewed := map[string]int{}
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		reviewed[tr.Spec.Token]++
		tr.Status.Authenticated = true
		tr.Status.User = authnv1.UserInfo{Username: "user-" + tr.Spec.Token}
		return true, tr, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		reviewed[sar.Spec.User+" "+sar.Spec.NonResourceAttributes.Path]++
		sar.Status.Allowed = true
		return true, sar, nil
	})
	authn := newTokenReviewer(client, DefaultCacheTTLs, 2, nil)
	authz := newAccessReviewer(client, DefaultCacheTTLs, 2, nil)
	ctx := context.Background()
	for _, token := range []string{"scraper", "probe", "scraper", "person", "scraper", "probe"} {
		if u, ok, err := authn.Authenticate(ctx, token); err != nil || !ok || u.Username != "user-"+token {
			t.Fatalf("token %s: %v %v %v", token, u, ok, err)
		}
	}
	for _, path := range []string{"/metrics", "/debug/pprof/", "/metrics", "/debug/pprof/heap", "/metrics", "/debug/pprof/"} {
		if ok, _, err := authz.Authorize(ctx, authnv1.UserInfo{Username: "u"}, "get", path); err != nil || !ok {
			t.Fatalf("path %s: %v %v", path, ok, err)
		}
	}
	// The scraper, used between every newcomer, is never evicted; probe is, once.
	want := map[string]int{
		"scraper": 1, "probe": 2, "person": 1,
		"u /metrics": 1, "u /debug/pprof/": 2, "u /debug/pprof/heap": 1,
	}
	for k, n := range want {
		if reviewed[k] != n {
			t.Errorf("%q reviewed %d times, want %d (all: %v)", k, reviewed[k], n, reviewed)
		}
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
	clk := &testClock{now: time.Unix(1000, 0)}
	authn := newTokenReviewer(client, ttls, cacheEntries, clk)
	authz := newAccessReviewer(client, ttls, cacheEntries, clk)
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
	clk.now = clk.now.Add(2 * time.Second) // rejections and denials expired, acceptances not
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

// TestZeroTTLsDisableCaching: with every TTL 0, each request is reviewed.
func TestZeroTTLsDisableCaching(t *testing.T) {
	client := fake.NewClientset()
	var tokenReviews, accessReviews int
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tokenReviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		tr.Status.Authenticated = tr.Spec.Token == "good"
		return true, tr, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		accessReviews++
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		sar.Status.Allowed = sar.Spec.NonResourceAttributes.Path == "/metrics"
		return true, sar, nil
	})
	authn := NewTokenReviewer(client, CacheTTLs{})
	authz := NewAccessReviewer(client, CacheTTLs{})
	ctx := context.Background()
	for range 2 {
		for _, token := range []string{"good", "bad"} {
			_, _, _ = authn.Authenticate(ctx, token)
		}
		for _, path := range []string{"/metrics", "/debug/pprof/"} {
			_, _, _ = authz.Authorize(ctx, authnv1.UserInfo{Username: "u"}, "get", path)
		}
	}
	if tokenReviews != 4 || accessReviews != 4 {
		t.Errorf("reviews = %d token, %d access; want 4 and 4 with caching off", tokenReviews, accessReviews)
	}
}
