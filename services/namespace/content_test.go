package namespace

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	allVerbs   = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
)

func newTestDeleter(f *fakeContent, pageSize int64) *deleter {
	return &deleter{content: f, pageSize: pageSize, now: f.now, bulk: make(chan struct{}, 4)}
}

func always(context.Context) error { return nil }

func TestDeleteAllDeletesLargeCollectionsInPages(t *testing.T) {
	f := newFakeContent(time.Now)
	f.add(configMaps, "ns", 1234)
	f.add(configMaps, "other", 7)
	// Any list or deletecollection without a limit, or above 100, fails.
	f.maxLimit = 100
	d := newTestDeleter(f, 100)
	out := d.deleteAll(context.Background(), "ns", resource{GVR: configMaps, Verbs: allVerbs}, always)
	if out.err != nil {
		t.Fatal(out.err)
	}
	if out.deleted != 1234 || out.remaining != 0 {
		t.Fatalf("deleted %d, remaining %d; want 1234, 0", out.deleted, out.remaining)
	}
	if n := f.count(configMaps, "ns"); n != 0 {
		t.Fatalf("%d objects left", n)
	}
	if n := f.count(configMaps, "other"); n != 7 {
		t.Fatalf("another namespace lost objects: %d left of 7", n)
	}
	if got := len(f.callsOf("deletecollection")); got != 13 {
		t.Errorf("%d deletecollection calls, want 13 (one per page of 100)", got)
	}
	if got := len(f.callsOf("delete ")); got != 0 {
		t.Errorf("%d single deletes, want none when deletecollection works", got)
	}
}

func TestDeleteAllWithoutDeleteCollectionDeletesEachAndRemembers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		verbs []string
		deny  bool // the apiserver answers 405 although discovery listed the verb
	}{
		{name: "discovery says so", verbs: []string{"delete", "get", "list"}},
		{name: "the apiserver says so", verbs: allVerbs, deny: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeContent(time.Now)
			f.add(configMaps, "ns", 25)
			f.notAllowed[opKey{configMaps, verbDeleteCollection}] = tc.deny
			d := newTestDeleter(f, 10)
			r := resource{GVR: configMaps, Verbs: tc.verbs}
			out := d.deleteAll(context.Background(), "ns", r, always)
			if out.err != nil || out.remaining != 0 || f.count(configMaps, "ns") != 0 {
				t.Fatalf("err %v, remaining %d, left %d", out.err, out.remaining, f.count(configMaps, "ns"))
			}
			if got := len(f.callsOf("delete ")); got != 25 {
				t.Fatalf("%d single deletes, want 25", got)
			}
			tried := len(f.callsOf("deletecollection"))
			if !tc.deny && tried != 0 {
				t.Fatalf("deletecollection tried %d times although discovery does not list it", tried)
			}
			// A second namespace: the 405 is remembered, deletecollection is not tried again.
			f.add(configMaps, "ns2", 5)
			d.deleteAll(context.Background(), "ns2", r, always)
			if again := len(f.callsOf("deletecollection")); again != tried {
				t.Fatalf("deletecollection tried again after a 405 (%d calls, then %d)", tried, again)
			}
		})
	}
}

func TestDeleteAllListNotAllowedIsRemembered(t *testing.T) {
	f := newFakeContent(time.Now)
	f.notAllowed[opKey{configMaps, verbList}] = true
	d := newTestDeleter(f, 10)
	r := resource{GVR: configMaps, Verbs: allVerbs}
	if out := d.deleteAll(context.Background(), "ns", r, always); out.err != nil {
		t.Fatalf("405 on list is not an error: %v", out.err)
	}
	before := len(f.calls)
	d.deleteAll(context.Background(), "ns", r, always)
	// Without list, only an unbounded deletecollection is left to try.
	if got := f.calls[before:]; len(got) != 1 || got[0] != "deletecollection configmaps ns" {
		t.Fatalf("calls after remembering list is not allowed: %v", got)
	}
}

func TestDeleteAllCountsFinalizersAndDoesNotDeleteAgain(t *testing.T) {
	f := newFakeContent(time.Now)
	f.add(configMaps, "ns", 12, "example.com/a", "example.com/b")
	f.add(configMaps, "ns", 3, "example.com/a")
	f.add(configMaps, "ns", 5)
	d := newTestDeleter(f, 4)
	r := resource{GVR: configMaps, Verbs: allVerbs}
	out := d.deleteAll(context.Background(), "ns", r, always)
	if out.err != nil {
		t.Fatal(out.err)
	}
	if out.remaining != 15 || out.finalizers["example.com/a"] != 15 || out.finalizers["example.com/b"] != 12 {
		t.Fatalf("remaining %d, finalizers %v; want 15, a:15 b:12", out.remaining, out.finalizers)
	}
	if out.wait != finalizerEstimate {
		t.Fatalf("estimate %s, want %s for finalizers", out.wait, finalizerEstimate)
	}
	// The next sync finds every object already being deleted: it lists, deletes nothing.
	before := len(f.callsOf("delete"))
	out = d.deleteAll(context.Background(), "ns", r, always)
	if out.deleted != 0 || len(f.callsOf("delete")) != before {
		t.Fatalf("second sync deleted again: %d objects, %d calls", out.deleted, len(f.callsOf("delete"))-before)
	}
	f.removeFinalizers(configMaps, "ns")
	if out = d.deleteAll(context.Background(), "ns", r, always); out.remaining != 0 {
		t.Fatalf("remaining %d after finalizers went", out.remaining)
	}
}

func TestDeleteAllEstimatesGracefulTermination(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := newFakeContent(func() time.Time { return now })
	f.graceful[podsResource] = 30 * time.Second
	f.add(podsResource, "ns", 3)
	d := newTestDeleter(f, 10)
	out := d.deleteAll(context.Background(), "ns", resource{GVR: podsResource, Verbs: allVerbs}, always)
	if out.err != nil || out.remaining != 3 || out.wait != 30*time.Second {
		t.Fatalf("err %v, remaining %d, estimate %s; want nil, 3, 30s", out.err, out.remaining, out.wait)
	}
	// Past their deadline and still there (a node that is gone): the default estimate.
	now = now.Add(time.Minute)
	if out = d.deleteAll(context.Background(), "ns", resource{GVR: podsResource, Verbs: allVerbs}, always); out.wait != finalizerEstimate {
		t.Fatalf("estimate %s past the deadline, want %s", out.wait, finalizerEstimate)
	}
}

func TestDeleteAllReportsErrorsAndStopsWhenReplaced(t *testing.T) {
	f := newFakeContent(time.Now)
	f.add(configMaps, "ns", 3)
	f.failing[configMaps] = true
	d := newTestDeleter(f, 10)
	r := resource{GVR: configMaps, Verbs: allVerbs}
	if out := d.deleteAll(context.Background(), "ns", r, always); out.err == nil {
		t.Fatal("no error from a failing API")
	}
	f.failing[configMaps] = false
	replaced := func(context.Context) error { return &errStopped{reason: StopReplaced} }
	out := d.deleteAll(context.Background(), "ns", r, replaced)
	if out.stopped != StopReplaced || f.count(configMaps, "ns") != 3 || len(f.callsOf("delete")) != 0 {
		t.Fatalf("stopped %q, %d left, %d delete calls: a replaced namespace was touched", out.stopped, f.count(configMaps, "ns"), len(f.callsOf("delete")))
	}
}

func TestRequeueDelay(t *testing.T) {
	for _, tc := range []struct{ estimate, want time.Duration }{
		{0, time.Second},
		{time.Millisecond, 1500 * time.Millisecond},
		{15 * time.Second, 8500 * time.Millisecond},
		{30 * time.Second, 16 * time.Second},
		{2 * time.Hour, 5 * time.Minute}, // capped at the sync period
	} {
		if got := requeueDelay(tc.estimate, 5*time.Minute); got != tc.want {
			t.Errorf("requeueDelay(%s) = %s, want %s", tc.estimate, got, tc.want)
		}
	}
}
