// Hand-written review delegation: k8s.io/apiserver's would serve, but shared does not depend on it (binary size).

package serving

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
)

// Authenticator turns a bearer token into a user. ok is false for a token the apiserver does
// not accept; err is for a review that could not be made (the apiserver is unreachable).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (user authnv1.UserInfo, ok bool, err error)
}

// Authorizer decides whether user may use verb on the non-resource path.
type Authorizer interface {
	Authorize(ctx context.Context, user authnv1.UserInfo, verb, path string) (allowed bool, reason string, err error)
}

// CacheTTLs bound how long review answers are reused. A Prometheus scrape every 15 s must not
// cost a review each time, so the positive answers outlive a scrape interval; a revoked token
// or binding stops working within the TTL.
type CacheTTLs struct {
	Authenticated   time.Duration // a TokenReview that accepted the token
	Unauthenticated time.Duration // one that rejected it
	Authorized      time.Duration // an allowing SubjectAccessReview
	Unauthorized    time.Duration // a denying one
}

// DefaultCacheTTLs are the kubelet's webhook defaults, which serve the same purpose (scrapers
// and probes calling every few seconds): 2 minutes for a valid token, 5 minutes for an allow,
// 30 seconds for a denial. Rejected tokens are cached briefly so a misconfigured scraper does
// not turn into a TokenReview per request.
var DefaultCacheTTLs = CacheTTLs{
	Authenticated:   2 * time.Minute,
	Unauthenticated: 10 * time.Second,
	Authorized:      5 * time.Minute,
	Unauthorized:    30 * time.Second,
}

// reviewCache holds review answers, each until its own TTL, evicting the least recently used
// when full. A thin typed face on apimachinery's LRUExpireCache, which stores any and would
// keep an entry added with a zero TTL until the clock moves on: here 0 means "do not cache".
type reviewCache[V any] struct {
	lru *cache.LRUExpireCache
}

// newReviewCache holds up to size answers; clk nil means the wall clock.
func newReviewCache[V any](size int, clk cache.Clock) *reviewCache[V] {
	if clk == nil {
		return &reviewCache[V]{lru: cache.NewLRUExpireCache(size)}
	}
	return &reviewCache[V]{lru: cache.NewLRUExpireCacheWithClock(size, clk)}
}

func (c *reviewCache[V]) get(key string) (V, bool) {
	v, ok := c.lru.Get(key)
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

func (c *reviewCache[V]) put(key string, v V, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	c.lru.Add(key, v, ttl)
}

// cacheEntries bounds each review cache: far more distinct callers (scrapers, people with
// pprof) than a controller sees, at a few hundred bytes each.
const cacheEntries = 4096

// hash keys the caches: tokens are never kept in memory as they came.
func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

type authnResult struct {
	user authnv1.UserInfo
	ok   bool
}

// tokenReviewer authenticates with TokenReview, caching answers.
type tokenReviewer struct {
	client kubernetes.Interface
	ttls   CacheTTLs
	cache  *reviewCache[authnResult]
}

// NewTokenReviewer authenticates bearer tokens with TokenReviews sent through client.
func NewTokenReviewer(client kubernetes.Interface, ttls CacheTTLs) Authenticator {
	return newTokenReviewer(client, ttls, cacheEntries, nil)
}

func newTokenReviewer(client kubernetes.Interface, ttls CacheTTLs, size int, clk cache.Clock) *tokenReviewer {
	return &tokenReviewer{client: client, ttls: ttls, cache: newReviewCache[authnResult](size, clk)}
}

func (r *tokenReviewer) Authenticate(ctx context.Context, token string) (authnv1.UserInfo, bool, error) {
	key := hash(token)
	if res, ok := r.cache.get(key); ok {
		return res.user, res.ok, nil
	}
	review, err := r.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, false, err
	}
	res := authnResult{user: review.Status.User, ok: review.Status.Authenticated}
	ttl := r.ttls.Authenticated
	if !res.ok {
		ttl = r.ttls.Unauthenticated
	}
	r.cache.put(key, res, ttl)
	return res.user, res.ok, nil
}

type authzResult struct {
	allowed bool
	reason  string
}

// accessReviewer authorizes with SubjectAccessReview, caching answers.
type accessReviewer struct {
	client kubernetes.Interface
	ttls   CacheTTLs
	cache  *reviewCache[authzResult]
}

// NewAccessReviewer authorizes requests with SubjectAccessReviews sent through client.
func NewAccessReviewer(client kubernetes.Interface, ttls CacheTTLs) Authorizer {
	return newAccessReviewer(client, ttls, cacheEntries, nil)
}

func newAccessReviewer(client kubernetes.Interface, ttls CacheTTLs, size int, clk cache.Clock) *accessReviewer {
	return &accessReviewer{client: client, ttls: ttls, cache: newReviewCache[authzResult](size, clk)}
}

func (r *accessReviewer) Authorize(ctx context.Context, user authnv1.UserInfo, verb, path string) (bool, string, error) {
	who, _ := json.Marshal(user)
	key := hash(string(who), verb, path)
	if res, ok := r.cache.get(key); ok {
		return res.allowed, res.reason, nil
	}
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	review, err := r.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User:                  user.Username,
			UID:                   user.UID,
			Groups:                user.Groups,
			Extra:                 extra,
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}
	res := authzResult{allowed: review.Status.Allowed && !review.Status.Denied, reason: review.Status.Reason}
	ttl := r.ttls.Authorized
	if !res.allowed {
		ttl = r.ttls.Unauthorized
	}
	r.cache.put(key, res, ttl)
	return res.allowed, res.reason, nil
}

// Decision outcomes, the values of the decision label of the requests metric.
const (
	DecisionAlwaysAllowed = "always_allowed"
	DecisionAllowed       = "allowed"
	DecisionNoToken       = "unauthenticated" // no or rejected token: 401
	DecisionForbidden     = "forbidden"       // authenticated, not authorized: 403
	DecisionError         = "error"           // a review could not be made: 503
)

// Protect serves next only to requests that are always allowed by path, or that carry a
// bearer token the apiserver accepts for a user allowed the request's verb on its path.
// observe, when set, is told each decision.
func Protect(next http.Handler, authn Authenticator, authz Authorizer, alwaysAllow []string, observe func(decision string)) http.Handler {
	if observe == nil {
		observe = func(string) {}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if alwaysAllowed(alwaysAllow, r.URL.Path) {
			observe(DecisionAlwaysAllowed)
			next.ServeHTTP(w, r)
			return
		}
		token, ok := bearerToken(r)
		if !ok {
			observe(DecisionNoToken)
			w.Header().Set("WWW-Authenticate", `Bearer realm="kcm-split"`)
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		user, ok, err := authn.Authenticate(r.Context(), token)
		if err != nil {
			observe(DecisionError)
			http.Error(w, "authentication unavailable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !ok {
			observe(DecisionNoToken)
			w.Header().Set("WWW-Authenticate", `Bearer realm="kcm-split"`)
			http.Error(w, "Unauthorized: the token was not accepted", http.StatusUnauthorized)
			return
		}
		// Non-resource verbs are the lowercase HTTP method, as the apiserver derives them.
		verb := strings.ToLower(r.Method)
		allowed, reason, err := authz.Authorize(r.Context(), user, verb, r.URL.Path)
		if err != nil {
			observe(DecisionError)
			http.Error(w, "authorization unavailable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !allowed {
			observe(DecisionForbidden)
			msg := "Forbidden: user " + user.Username + " may not " + verb + " " + r.URL.Path
			if reason != "" {
				msg += ": " + reason
			}
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		observe(DecisionAllowed)
		next.ServeHTTP(w, r)
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
