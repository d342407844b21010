package namespace

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// What a group version's last good discovery says about it, the values of the
// last_discovery label of kcm_split_namespace_unavailable_group_versions.
const (
	// LastDiscoveryNone: never discovered successfully (by this process, nor as kept by
	// the holder before it: store.go). Unknown is not gone: it blocks like any failing API.
	LastDiscoveryNone = "none"
	// LastDiscoveryHoldsObjects: it served namespaced resources that can be listed or
	// deleted, so objects may be in any namespace: it blocks.
	LastDiscoveryHoldsObjects = "holds_objects"
	// LastDiscoveryHoldsNothing: it served nothing that can hold objects in a namespace
	// (only cluster-scoped resources, or namespaced ones that can be neither listed nor
	// deleted, such as reviews): with --allow-deletion-with-unavailable-groups it stops
	// blocking once unavailable for longer than the flag says.
	LastDiscoveryHoldsNothing = "holds_nothing"
)

// gvRecord is what this process knows of one group version's discovery.
type gvRecord struct {
	// good is when discovery last answered for it; zero if never known to have.
	good time.Time
	// holders are its namespaced resources that can be listed or deleted, as of good;
	// others the rest it served (cluster-scoped, or namespaced but holding nothing).
	holders, others []string
	// failingSince is the first failed discovery after the last good one; zero while it
	// answers.
	failingSince time.Time
	// mentioned is the latest discovery that returned it or found it failing.
	mentioned time.Time
}

func (r *gvRecord) lastDiscovery() string {
	switch {
	case r.good.IsZero():
		return LastDiscoveryNone
	case len(r.holders) > 0:
		return LastDiscoveryHoldsObjects
	}
	return LastDiscoveryHoldsNothing
}

// unavailableGV is one group version that failed discovery, with what is known of it.
type unavailableGV struct {
	gv schema.GroupVersion
	// since is when this process first saw it fail after its last good discovery.
	since time.Time
	// last is one of the LastDiscovery* values; holders names the resources when
	// LastDiscoveryHoldsObjects.
	last    string
	holders []string
}

func (u unavailableGV) String() string {
	switch u.last {
	case LastDiscoveryHoldsObjects:
		return fmt.Sprintf("%s (last served namespaced %s)", u.gv, strings.Join(u.holders, ", "))
	case LastDiscoveryNone:
		return fmt.Sprintf("%s (never discovered)", u.gv)
	}
	return fmt.Sprintf("%s (unavailable since %s)", u.gv, u.since.UTC().Format(time.RFC3339))
}

// apiMemory remembers, per group version, its last successful discovery: whether it served
// anything that can hold objects in a namespace, and since when it fails. It lives as long as
// the process; with --allow-deletion-with-unavailable-groups the Lease holder also keeps it
// in the cluster (store.go) and the next holder starts from it (seed).
type apiMemory struct {
	mu  sync.Mutex
	gvs map[schema.GroupVersion]*gvRecord
	// observed is when the latest discovery observed was made: what the memory is current as of.
	observed time.Time
}

func newAPIMemory() *apiMemory { return &apiMemory{gvs: map[schema.GroupVersion]*gvRecord{}} }

// observe records one discovery made at started: every group version it returned and that
// did not fail answered; every failed one starts (or goes on) failing. lists must come from a
// discovery that returns every group version it reached, empty ones included, and its
// cluster-scoped resources too (ServerPreferredResources).
// It reports whether a group version that was failing answered again.
func (m *apiMemory) observe(started time.Time, lists []*metav1.APIResourceList, failed []schema.GroupVersion) (recovered bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, list := range lists {
		if list == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil || slices.Contains(failed, gv) {
			// A failed group version may come with a partial fallback list: not a good
			// discovery.
			continue
		}
		var holders, others []string
		for _, r := range list.APIResources {
			// Subresources live and die with their parent; a namespaced resource that can
			// be neither listed nor deleted (reviews, bindings) keeps nothing to find.
			if strings.Contains(r.Name, "/") {
				continue
			}
			if r.Namespaced && (slices.Contains(r.Verbs, verbList) || slices.Contains(r.Verbs, verbDelete) || slices.Contains(r.Verbs, verbDeleteCollection)) {
				holders = append(holders, r.Name)
			} else {
				others = append(others, r.Name)
			}
		}
		slices.Sort(holders)
		slices.Sort(others)
		if prev, ok := m.gvs[gv]; ok && !prev.failingSince.IsZero() {
			recovered = true
		}
		m.gvs[gv] = &gvRecord{good: started, holders: holders, others: others, mentioned: started}
	}
	for _, gv := range failed {
		rec, ok := m.gvs[gv]
		if !ok {
			rec = &gvRecord{}
			m.gvs[gv] = rec
		}
		if rec.failingSince.IsZero() {
			rec.failingSince = started
		}
		rec.mentioned = started
	}
	if started.After(m.observed) {
		m.observed = started
	}
	return recovered
}

// unavailable describes each failed group version.
func (m *apiMemory) unavailable(failed []schema.GroupVersion) []unavailableGV {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]unavailableGV, 0, len(failed))
	for _, gv := range failed {
		u := unavailableGV{gv: gv, last: LastDiscoveryNone}
		if rec, ok := m.gvs[gv]; ok {
			u.since, u.last, u.holders = rec.failingSince, rec.lastDiscovery(), slices.Clone(rec.holders)
		}
		out = append(out, u)
	}
	return out
}

// countByLastDiscovery returns how many of the failed group versions are in each LastDiscovery* state.
func countByLastDiscovery(us []unavailableGV) map[string]int {
	out := map[string]int{LastDiscoveryNone: 0, LastDiscoveryHoldsObjects: 0, LastDiscoveryHoldsNothing: 0}
	for _, u := range us {
		out[u.last]++
	}
	return out
}

// excuse decides, for the group versions failing discovery, whether a namespace may be
// finalized anyway: only if every one of them is known to have held nothing that can be in
// a namespace and has been unavailable for at least allowed. It returns them all when so;
// otherwise nil and, if every one of them held nothing but some have not been unavailable
// long enough, how long until the last one has (0 when waiting cannot help).
func excuse(us []unavailableGV, allowed time.Duration, now time.Time) (excused []unavailableGV, wait time.Duration) {
	if allowed <= 0 || len(us) == 0 {
		return nil, 0
	}
	for _, u := range us {
		if u.last != LastDiscoveryHoldsNothing {
			return nil, 0
		}
		wait = max(wait, u.since.Add(allowed).Sub(now))
	}
	if wait > 0 {
		return nil, wait
	}
	return us, 0
}

func gvNames(us []unavailableGV) string {
	names := make([]string, 0, len(us))
	for _, u := range us {
		names = append(names, u.String())
	}
	return strings.Join(names, ", ")
}
