package namespace

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/kcm-split/kcm-split/shared/worker"
)

var (
	// harmlessGV serves nothing that can be in a namespace: a cluster-scoped resource, and a
	// namespaced one that can only be created (a review).
	harmlessGV = schema.GroupVersion{Group: "harmless.example.com", Version: "v1"}
	// holdingGV serves namespaced objects.
	holdingGV = schema.GroupVersion{Group: "holding.example.com", Version: "v1"}
	// neverGV is never discovered successfully.
	neverGV = schema.GroupVersion{Group: "never.example.com", Version: "v1"}
)

func harmlessList() *metav1.APIResourceList {
	return &metav1.APIResourceList{GroupVersion: harmlessGV.String(), APIResources: []metav1.APIResource{
		{Name: "gadgets", Namespaced: false, Kind: "Gadget", Verbs: allVerbs},
		{Name: "gadgetreviews", Namespaced: true, Kind: "GadgetReview", Verbs: []string{"create"}},
	}}
}

func holdingList() *metav1.APIResourceList {
	return &metav1.APIResourceList{GroupVersion: holdingGV.String(), APIResources: []metav1.APIResource{
		{Name: "things", Namespaced: true, Kind: "Thing", Verbs: []string{"get", "list"}},
		{Name: "things/status", Namespaced: true, Kind: "Thing", Verbs: []string{"get"}},
	}}
}

func TestExcuseOnlyWhatIsKnownToHoldNothing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := newAPIMemory()
	core, _ := coreDiscovery()
	// First a good discovery of both groups; the third is not there yet.
	m.observe(t0, append(core, harmlessList(), holdingList()), nil)
	// Then all three fail.
	m.observe(t0.Add(time.Minute), core, []schema.GroupVersion{harmlessGV, holdingGV, neverGV})
	// A later failure does not move the moment they started failing.
	m.observe(t0.Add(2*time.Minute), core, []schema.GroupVersion{harmlessGV, holdingGV, neverGV})

	const allowed = 5 * time.Minute
	late := t0.Add(time.Minute + allowed)
	for _, tc := range []struct {
		name     string
		failed   []schema.GroupVersion
		now      time.Time
		allowed  time.Duration
		excused  bool
		wait     time.Duration
		describe string
	}{
		{name: "held nothing, unavailable long enough", failed: []schema.GroupVersion{harmlessGV}, now: late, allowed: allowed, excused: true, describe: "unavailable since 2026-01-01T00:01:00Z"},
		{name: "held nothing, not long enough yet", failed: []schema.GroupVersion{harmlessGV}, now: late.Add(-time.Minute), allowed: allowed, wait: time.Minute},
		{name: "flag off: upstream", failed: []schema.GroupVersion{harmlessGV}, now: late.Add(time.Hour), allowed: 0},
		{name: "served namespaced objects", failed: []schema.GroupVersion{holdingGV}, now: late.Add(time.Hour), allowed: allowed, describe: "last served namespaced things"},
		{name: "never discovered", failed: []schema.GroupVersion{neverGV}, now: late.Add(time.Hour), allowed: allowed, describe: "never discovered"},
		{name: "one blocking group blocks them all", failed: []schema.GroupVersion{harmlessGV, neverGV}, now: late.Add(time.Hour), allowed: allowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			us := m.unavailable(tc.failed)
			excused, wait := excuse(us, tc.allowed, tc.now)
			if (excused != nil) != tc.excused || wait != tc.wait {
				t.Fatalf("excused %v, wait %s; want excused %v, wait %s", excused, wait, tc.excused, tc.wait)
			}
			if tc.describe != "" && !strings.Contains(gvNames(us), tc.describe) {
				t.Errorf("%q does not say %q", gvNames(us), tc.describe)
			}
		})
	}

	// It answers again, then fails again: the clock starts over.
	m.observe(t0.Add(10*time.Minute), append(core, harmlessList()), nil)
	m.observe(t0.Add(11*time.Minute), core, []schema.GroupVersion{harmlessGV})
	if _, wait := excuse(m.unavailable([]schema.GroupVersion{harmlessGV}), allowed, t0.Add(12*time.Minute)); wait != 4*time.Minute {
		t.Fatalf("wait %s after failing again, want 4m", wait)
	}
	// It comes back serving namespaced objects: no longer excusable.
	grown := harmlessList()
	grown.APIResources = append(grown.APIResources, metav1.APIResource{Name: "gizmos", Namespaced: true, Verbs: []string{"delete"}})
	m.observe(t0.Add(20*time.Minute), append(core, grown), nil)
	m.observe(t0.Add(21*time.Minute), core, []schema.GroupVersion{harmlessGV})
	if excused, wait := excuse(m.unavailable([]schema.GroupVersion{harmlessGV}), allowed, t0.Add(time.Hour)); excused != nil || wait != 0 {
		t.Fatalf("excused %v (wait %s) a group that served namespaced gizmos", excused, wait)
	}
	// A failed group version's fallback list is not a good discovery.
	m.observe(t0.Add(22*time.Minute), append(core, holdingList()), []schema.GroupVersion{neverGV, holdingGV})
	if u := m.unavailable([]schema.GroupVersion{holdingGV})[0]; !u.since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("holding failing since %s, want the first failure", u.since)
	}
}

// switchableDiscovery serves core plus harmlessGV until broken, then reports harmlessGV (and
// extra) failing.
type switchableDiscovery struct {
	mu     sync.Mutex
	broken bool
	extra  []schema.GroupVersion
}

func (d *switchableDiscovery) discover() ([]*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	lists, _ := coreDiscovery()
	if !d.broken {
		return append(lists, harmlessList()), nil
	}
	failed := map[schema.GroupVersion]error{harmlessGV: errors.New("the server is currently unable to handle the request")}
	for _, gv := range d.extra {
		failed[gv] = errors.New("the server is currently unable to handle the request")
	}
	return lists, &discovery.ErrGroupDiscoveryFailed{Groups: failed}
}

func (d *switchableDiscovery) set(broken bool, extra ...schema.GroupVersion) {
	d.mu.Lock()
	d.broken, d.extra = broken, extra
	d.mu.Unlock()
}

func TestSyncFinalizesPastGroupsThatHeldNothingOnlyWithTheFlag(t *testing.T) {
	for _, allowed := range []time.Duration{0, 10 * time.Minute} {
		t.Run("allowed="+allowed.String(), func(t *testing.T) {
			// The informer's handlers read the clock too.
			var mu sync.Mutex
			at := time.Now()
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
			advance := func(d time.Duration) { mu.Lock(); at = at.Add(d); mu.Unlock() }
			d := &switchableDiscovery{}
			f := newFixture(t, d.discover, terminating("ns", "uid-1"))
			f.c.opts.AllowDeletionWithUnavailableGroups = allowed
			f.c.now, f.c.resources.now = clock, clock
			f.content.add(configMaps, "ns", 4)

			// A good discovery first (the refresh at start does this), then the group fails,
			// and another failing group that was never discovered is there too.
			f.c.resources.get(clock())
			d.set(true, neverGV)
			advance(time.Second)
			f.c.resources.invalidate()
			if err := f.sync("ns"); err == nil {
				t.Fatal("finalized while a never discovered group fails")
			}
			if n := f.content.count(configMaps, "ns"); n != 0 {
				t.Fatalf("%d ConfigMaps left", n)
			}

			// Only the group that held nothing fails now.
			d.set(true)
			advance(time.Minute)
			f.c.resources.invalidate()
			err := f.sync("ns")
			if allowed == 0 {
				var rq *worker.Requeue
				if err == nil || errors.As(err, &rq) {
					t.Fatalf("sync = %v, want the discovery error, as upstream", err)
				}
			} else if after := requeueOf(t, err); after != allowed-time.Minute {
				t.Fatalf("requeue after %s, want when the group has been unavailable for %s", after, allowed)
			}

			advance(time.Hour)
			f.c.resources.invalidate()
			err = f.sync("ns")
			finalized := !slices.Contains(f.namespace("ns").Spec.Finalizers, v1.FinalizerKubernetes)
			if allowed == 0 {
				if err == nil || finalized {
					t.Fatalf("sync = %v, finalized %v: without the flag any unavailable group blocks", err, finalized)
				}
				return
			}
			if err != nil || !finalized {
				t.Fatalf("sync = %v, finalized %v: want finalized", err, finalized)
			}
			var events []string
			for len(f.recorder.Events) > 0 {
				events = append(events, <-f.recorder.Events)
			}
			if !slices.ContainsFunc(events, func(e string) bool {
				return strings.HasPrefix(e, "Warning "+EventFinalizedWithUnavailableAPIs) && strings.Contains(e, harmlessGV.String())
			}) {
				t.Fatalf("no %s Event naming %s: %q", EventFinalizedWithUnavailableAPIs, harmlessGV, events)
			}
		})
	}
}
