package namespace

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

func TestBuildSnapshotKeepsDeletableNamespacedResources(t *testing.T) {
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Namespaced: true, Verbs: allVerbs},
			{Name: "pods/status", Namespaced: true, Verbs: allVerbs},
			{Name: "nodes", Namespaced: false, Verbs: allVerbs},
			{Name: "bindings", Namespaced: true, Verbs: []string{"create"}},
		}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			{Name: "widgets", Namespaced: true, Verbs: []string{"delete", "list"}},
		}},
		{GroupVersion: "a/b/c", APIResources: []metav1.APIResource{{Name: "x", Namespaced: true, Verbs: allVerbs}}},
	}
	failed := &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{{Group: "broken.example.com", Version: "v1"}: errors.New("stale")}}
	s := buildSnapshot(time.Now(), lists, failed)
	var got []string
	for _, r := range s.resources {
		got = append(got, r.GVR.String())
	}
	want := []string{"/v1, Resource=pods", "example.com/v1, Resource=widgets"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("resources %v, want %v", got, want)
	}
	if s.parseErr == nil || len(s.failedGroups) != 1 || s.failedGroups[0] != "broken.example.com/v1" {
		t.Fatalf("parseErr %v, failedGroups %v", s.parseErr, s.failedGroups)
	}
}

func TestResourceCacheIsFreshEnoughForEachNamespace(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	calls := 0
	fail := false
	c := newResourceCache(func() ([]*metav1.APIResourceList, error) {
		calls++
		if fail {
			return nil, errors.New("down")
		}
		return nil, nil
	})
	c.now = func() time.Time { return now }

	c.get(now)
	c.get(now) // same moment: reused
	if calls != 1 {
		t.Fatalf("%d discoveries, want 1", calls)
	}
	// A namespace first seen after the last discovery needs a new one: a CRD may have
	// been created in between.
	now = now.Add(time.Second)
	c.get(now)
	if calls != 2 {
		t.Fatalf("%d discoveries, want 2", calls)
	}
	// An older namespace reuses it, until it is too old or invalidated.
	c.get(now.Add(-time.Hour))
	if calls != 2 {
		t.Fatalf("%d discoveries, want 2", calls)
	}
	c.invalidate()
	c.get(now.Add(-time.Hour))
	if calls != 3 {
		t.Fatalf("%d discoveries after invalidate, want 3", calls)
	}
	now = now.Add(discoveryMaxAge)
	c.get(time.Time{})
	if calls != 4 {
		t.Fatalf("%d discoveries after max age, want 4", calls)
	}
	// A failure is kept only briefly.
	fail = true
	c.invalidate()
	c.get(time.Time{})
	now = now.Add(discoveryFailedMaxAge)
	c.get(time.Time{})
	if calls != 6 {
		t.Fatalf("%d discoveries, want a failed one retried after %s", calls, discoveryFailedMaxAge)
	}
}
