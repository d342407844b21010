// Package health serves /healthz, /readyz and /livez from named checks, in the format of the
// Kubernetes components: "ok" or a 500 listing the failed checks, "?verbose" for every check,
// "?exclude=<name>" to skip one, and /<path>/<name> for a single check.
package health

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// Check returns nil when healthy. It must be cheap and must not block: probes call it often.
type Check func(*http.Request) error

// Endpoint names a probe path.
type Endpoint string

// The three probe endpoints.
const (
	Healthz Endpoint = "/healthz"
	Readyz  Endpoint = "/readyz"
	Livez   Endpoint = "/livez"
)

type named struct {
	name string
	// nameFn, when set, gives the name at each probe (see AddNamed).
	nameFn func() string
	check  Check
}

func (n named) current() string {
	if n.nameFn != nil {
		return n.nameFn()
	}
	return n.name
}

// Checks is a set of named checks per endpoint. The zero value is not usable; use New.
type Checks struct {
	mu     sync.RWMutex
	checks map[Endpoint][]named
}

// New returns an empty set; every endpoint starts with a "ping" check that always passes,
// so a probe answers "ok" before anything else is registered.
func New() *Checks {
	c := &Checks{checks: map[Endpoint][]named{}}
	for _, e := range []Endpoint{Healthz, Readyz, Livez} {
		c.checks[e] = []named{{name: "ping", check: func(*http.Request) error { return nil }}}
	}
	return c
}

// Add registers check under name on the given endpoints. A name registered twice on one
// endpoint replaces the earlier check.
func (c *Checks) Add(name string, check Check, endpoints ...Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range endpoints {
		list := c.checks[e]
		replaced := false
		for i := range list {
			if list[i].name == name {
				list[i].check = check
				replaced = true
			}
		}
		if !replaced {
			list = append(list, named{name: name, check: check})
		}
		c.checks[e] = list
	}
}

// AddNamed registers check on the given endpoints under a name that name gives at each probe,
// so a check that always passes can still show a state in "?verbose" (as "[+]<name> ok").
func (c *Checks) AddNamed(name func() string, check Check, endpoints ...Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range endpoints {
		c.checks[e] = append(c.checks[e], named{nameFn: name, check: check})
	}
}

// Install registers the three endpoints (and their per-check sub-paths) on mux.
func (c *Checks) Install(mux *http.ServeMux) {
	for _, e := range []Endpoint{Healthz, Readyz, Livez} {
		mux.Handle(string(e), c.handler(e, ""))
		mux.Handle(string(e)+"/", c.handler(e, string(e)+"/"))
	}
}

func (c *Checks) handler(e Endpoint, prefix string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.RLock()
		list := append([]named(nil), c.checks[e]...)
		c.mu.RUnlock()

		if prefix != "" {
			name := strings.TrimPrefix(r.URL.Path, prefix)
			for _, n := range list {
				if n.current() == name {
					if err := n.check(r); err != nil {
						http.Error(w, fmt.Sprintf("internal server error: %v", err), http.StatusInternalServerError)
						return
					}
					writeText(w, http.StatusOK, "ok")
					return
				}
			}
			http.NotFound(w, r)
			return
		}

		excluded := map[string]bool{}
		for _, x := range r.URL.Query()["exclude"] {
			excluded[x] = true
		}
		var out strings.Builder
		var failed []string
		for _, n := range list {
			name := n.current()
			if excluded[name] {
				fmt.Fprintf(&out, "[+]%s excluded: ok\n", name)
				continue
			}
			if err := n.check(r); err != nil {
				failed = append(failed, name)
				fmt.Fprintf(&out, "[-]%s failed: %v\n", name, err)
				continue
			}
			fmt.Fprintf(&out, "[+]%s ok\n", name)
		}
		_, verbose := r.URL.Query()["verbose"]
		if len(failed) > 0 {
			sort.Strings(failed)
			fmt.Fprintf(&out, "%s check failed: %s\n", strings.TrimPrefix(string(e), "/"), strings.Join(failed, ","))
			writeText(w, http.StatusInternalServerError, out.String())
			return
		}
		if verbose {
			fmt.Fprintf(&out, "%s check passed\n", strings.TrimPrefix(string(e), "/"))
			writeText(w, http.StatusOK, out.String())
			return
		}
		writeText(w, http.StatusOK, "ok")
	})
}

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
