package namespace

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// Verbs the deleter cares about.
const (
	verbList             = "list"
	verbDelete           = "delete"
	verbDeleteCollection = "deletecollection"
)

// resource is one namespaced resource that supports delete, at its preferred version.
type resource struct {
	GVR   schema.GroupVersionResource
	Verbs []string
	// Kind names its objects in conditions ("ConfigMap/settings").
	Kind string
}

func (r resource) supports(verb string) bool { return slices.Contains(r.Verbs, verb) }

// snapshot is the result of one discovery: what can be deleted, and what could not be
// discovered. A partial failure still lists every resource of the groups that answered.
type snapshot struct {
	// started is when the discovery request was made; objects of any resource that existed
	// at that moment are covered.
	started time.Time
	// resources are sorted by group, version, resource so that runs are reproducible.
	resources []resource
	// discoveryErr is the failure to discover some (or all) group versions; failedGroups
	// names them, sorted.
	discoveryErr error
	failedGroups []string
	failedGVs    []schema.GroupVersion
	// parseErr reports group versions whose name does not parse.
	parseErr error
}

// discoveryMaxAge bounds how long a successful discovery is reused. Correctness does not
// depend on it (see resourceCache.get); it only picks up changed verbs.
const discoveryMaxAge = 30 * time.Second

// discoveryFailedMaxAge keeps a failed discovery for at most this long, so that concurrent
// syncs share one attempt but a fixed API is noticed at once.
const discoveryFailedMaxAge = time.Second

// resourceCache discovers the namespaced resources of the cluster and shares the result
// between syncs. Upstream discovers on every sync, two or more requests per namespace per
// sync; with hundreds of namespaces deleted at once that adds up.
type resourceCache struct {
	discover func() ([]*metav1.APIResourceList, error)
	now      func() time.Time
	// observe, if set, is told of every discovery made, under the cache's lock: the memory
	// of each group version's last good discovery is fed from here.
	observe func(started time.Time, lists []*metav1.APIResourceList, s *snapshot)

	mu   sync.Mutex
	cur  *snapshot
	gen  uint64 // bumped by invalidate
	seen uint64 // gen the current snapshot was taken at
}

func newResourceCache(discover func() ([]*metav1.APIResourceList, error)) *resourceCache {
	return &resourceCache{discover: discover, now: time.Now}
}

// get returns a discovery made no earlier than notBefore. Callers pass the moment they first
// saw the namespace deleted: every resource that existed then is in the answer, including
// CRDs created after this process started, and a CRD created later cannot hold objects in
// the namespace because the apiserver refuses creates in a terminating namespace.
func (c *resourceCache) get(notBefore time.Time) *snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.cur; s != nil && c.seen == c.gen && !s.started.Before(notBefore) {
		maxAge := discoveryMaxAge
		if s.discoveryErr != nil || s.parseErr != nil {
			maxAge = discoveryFailedMaxAge
		}
		if c.now().Sub(s.started) < maxAge {
			return s
		}
	}
	started := c.now()
	lists, err := c.discover()
	c.cur = buildSnapshot(started, lists, err)
	c.seen = c.gen
	if c.observe != nil {
		c.observe(started, lists, c.cur)
	}
	return c.cur
}

// invalidate makes the next get discover again: an APIService or CRD changed.
func (c *resourceCache) invalidate() {
	c.mu.Lock()
	c.gen++
	c.mu.Unlock()
}

// buildSnapshot keeps the namespaced resources that support delete and records what
// failed. lists may hold cluster-scoped resources too: they are left out here.
func buildSnapshot(started time.Time, lists []*metav1.APIResourceList, err error) *snapshot {
	s := &snapshot{started: started, discoveryErr: err}
	if err != nil {
		var gdf *discovery.ErrGroupDiscoveryFailed
		if errors.As(err, &gdf) {
			for gv := range gdf.Groups {
				s.failedGVs = append(s.failedGVs, gv)
			}
			slices.SortFunc(s.failedGVs, func(a, b schema.GroupVersion) int { return strings.Compare(a.String(), b.String()) })
			for _, gv := range s.failedGVs {
				s.failedGroups = append(s.failedGroups, gv.String())
			}
		}
	}
	var parseErrs []string
	seen := map[schema.GroupVersionResource]bool{}
	for _, list := range lists {
		if list == nil {
			continue
		}
		gv, perr := schema.ParseGroupVersion(list.GroupVersion)
		if perr != nil {
			parseErrs = append(parseErrs, fmt.Sprintf("%q: %v", list.GroupVersion, perr))
			continue
		}
		for _, r := range list.APIResources {
			// Subresources (pods/status) are deleted with their parent.
			if !r.Namespaced || strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, verbDelete) {
				continue
			}
			gvr := gv.WithResource(r.Name)
			if seen[gvr] {
				continue
			}
			seen[gvr] = true
			s.resources = append(s.resources, resource{GVR: gvr, Verbs: slices.Clone(r.Verbs), Kind: r.Kind})
		}
	}
	if len(parseErrs) > 0 {
		sort.Strings(parseErrs)
		s.parseErr = fmt.Errorf("failed to parse group versions: %s", strings.Join(parseErrs, ", "))
	}
	sort.Slice(s.resources, func(i, j int) bool {
		a, b := s.resources[i].GVR, s.resources[j].GVR
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Resource < b.Resource
	})
	return s
}
