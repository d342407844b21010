package foreign

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time                 { return c.t }
func (c *fakeClock) step(d time.Duration) time.Time { c.t = c.t.Add(d); return c.t }

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

const (
	subsets   = `{"f:subsets":{}}`
	labels    = `{"f:metadata":{"f:labels":{"f:app":{}}}}`
	used      = `{"f:status":{"f:hard":{"f:pods":{}},"f:used":{"f:pods":{}}}}`
	statusAll = `{"f:status":{}}`
	hardOnly  = `{"f:spec":{"f:hard":{"f:pods":{}}}}`
)

func entry(manager string, op metav1.ManagedFieldsOperationType, sub string, at time.Time, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: sub, APIVersion: "v1",
		Time: &metav1.Time{Time: at}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
}

func endpoints(uid string, entries ...metav1.ManagedFieldsEntry) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: types.UID(uid), ManagedFields: entries}}
}

type fixture struct {
	clock    *fakeClock
	reg      *prometheus.Registry
	recorder *record.FakeRecorder
	d        *Detector
	target   *Target
}

func newFixture(t *testing.T, o Options) *fixture {
	t.Helper()
	f := &fixture{clock: &fakeClock{t: t0}, reg: prometheus.NewRegistry(), recorder: record.NewFakeRecorder(100)}
	o.Ours = []string{"endpoints-controller"}
	o.Registerer = f.reg
	o.Logger = logr.Discard()
	o.Now = f.clock.now
	f.d = New(o)
	f.target = &Target{Controller: "endpoints", Fields: [][]string{{"subsets"}}, Recorder: f.recorder}
	return f
}

func (f *fixture) count() float64 {
	return testutil.ToFloat64(f.d.detected.WithLabelValues(f.target.Controller))
}

func (f *fixture) events() []string { return fixtures.Events(f.recorder) }

func TestOwnAndIgnoredManagersDoNotCount(t *testing.T) {
	at := t0.Add(time.Second)
	for _, tc := range []struct {
		name  string
		entry metav1.ManagedFieldsEntry
		want  int
	}{
		{"our manager (any replica, any term)", entry("endpoints-controller", metav1.ManagedFieldsOperationUpdate, "", at, subsets), 0},
		{"the API server", entry("kube-apiserver", metav1.ManagedFieldsOperationUpdate, "", at, subsets), 0},
		{"fields before the first apply", entry("before-first-apply", metav1.ManagedFieldsOperationUpdate, "", at, subsets), 0},
		{"KCM by update", entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", at, subsets), 1},
		{"KCM by server-side apply", entry("kube-controller-manager", metav1.ManagedFieldsOperationApply, "", at, subsets), 1},
		{"a human with kubectl", entry("kubectl-edit", metav1.ManagedFieldsOperationUpdate, "", at, subsets), 1},
		{"another manager on fields we do not own", entry("kubectl-label", metav1.ManagedFieldsOperationUpdate, "", at, labels), 0},
		{"a foreign write from before the detector started", entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", t0.Add(-time.Second), subsets), 0},
		{"a foreign write in the detector's first second", entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", t0, subsets), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{})
			got := f.d.Observe(f.target, endpoints("u1", tc.entry))
			if len(got) != tc.want || f.count() != float64(tc.want) || len(f.events()) != tc.want {
				t.Errorf("found %v, counter %v; want %d", got, f.count(), tc.want)
			}
		})
	}
}

// A term built before its controllers may run (waiting for the take-over's proof or the
// migration Lease) sees, once they run, the writes the other owner made while it waited: they
// are history, not a second writer. A write after the first object looked at is one.
func TestWritesWhileWaitingAreHistory(t *testing.T) {
	f := newFixture(t, Options{})
	during := f.clock.step(3 * time.Minute) // KCM still runs the controller, this term waits
	f.clock.step(2 * time.Minute)           // the controllers start: their informers list
	if got := f.d.Observe(f.target, endpoints("u1", entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", during, subsets))); len(got) != 0 || f.count() != 0 {
		t.Errorf("a write from before the controllers ran was reported: %v, counter %v", got, f.count())
	}
	after := f.clock.step(time.Minute)
	if got := f.d.Observe(f.target, endpoints("u1", entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", after, subsets))); len(got) != 1 || f.count() != 1 {
		t.Errorf("a write after the controllers ran: found %v, counter %v; want it reported", got, f.count())
	}
}

func TestOwnsFilters(t *testing.T) {
	f := newFixture(t, Options{})
	f.target.Owns = func(m metav1.Object) bool { return m.GetName() != "web" }
	if got := f.d.Observe(f.target, endpoints("u1", entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", t0, subsets))); len(got) != 0 {
		t.Errorf("an object the controller does not own was reported: %v", got)
	}
}

func TestFieldPaths(t *testing.T) {
	for _, tc := range []struct {
		fields string
		paths  [][]string
		want   bool
	}{
		{used, [][]string{{"status", "used"}}, true},
		{statusAll, [][]string{{"status", "used"}}, true}, // status owned whole
		{hardOnly, [][]string{{"status", "used"}}, false},
		{labels, [][]string{{"subsets"}}, false},
		{labels, [][]string{{"subsets"}, {"metadata", "labels"}}, true},
		{`not json`, [][]string{{"subsets"}}, false},
	} {
		if got := touches(metav1.NewFieldsV1(tc.fields), tc.paths); got != tc.want {
			t.Errorf("touches(%s, %v) = %v, want %v", tc.fields, tc.paths, got, tc.want)
		}
	}
}

// A foreign writer that keeps writing is one episode: one Event, counter 1, however many
// writes and objects; after the quiet period its next write is a new episode.
func TestEpisodes(t *testing.T) {
	f := newFixture(t, Options{QuietPeriod: time.Minute})
	kcm := func(uid string, at time.Time) *corev1.ConfigMap {
		return endpoints(uid, entry("endpoints-controller", metav1.ManagedFieldsOperationUpdate, "", t0, labels),
			entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", at, subsets))
	}
	for i := range 10 {
		at := f.clock.step(5 * time.Second)
		f.d.Observe(f.target, kcm("u1", at))
		f.d.Observe(f.target, kcm("u1", at)) // a resync or relist of the same version
		f.d.Observe(f.target, kcm(fmt.Sprintf("o%d", i), at))
	}
	if f.count() != 1 {
		t.Fatalf("counter %v after one episode, want 1", f.count())
	}
	ev := f.events()
	if len(ev) != 1 || !strings.Contains(ev[0], Reason) || !strings.Contains(ev[0], "kube-controller-manager") {
		t.Fatalf("events %q, want one %s naming the manager", ev, Reason)
	}
	// Another manager is an episode of its own.
	f.d.Observe(f.target, endpoints("u2", entry("kubectl-edit", metav1.ManagedFieldsOperationUpdate, "", f.clock.t, subsets)))
	if f.count() != 2 {
		t.Fatalf("counter %v after a second manager, want 2", f.count())
	}
	// Quiet for less than the period: the same episode.
	at := f.clock.step(59 * time.Second)
	f.d.Observe(f.target, kcm("u1", at))
	if f.count() != 2 {
		t.Fatalf("counter %v within the quiet period, want 2", f.count())
	}
	// Quiet for the period: a new episode.
	at = f.clock.step(time.Minute)
	f.d.Observe(f.target, kcm("u1", at))
	if f.count() != 3 {
		t.Fatalf("counter %v after the quiet period, want 3", f.count())
	}
	// Another controller of the binary has episodes of its own.
	other := &Target{Controller: "mirroring", Fields: [][]string{{"subsets"}}}
	f.d.Observe(other, kcm("u9", f.clock.step(time.Second)))
	if got := testutil.ToFloat64(f.d.detected.WithLabelValues("mirroring")); got != 1 {
		t.Fatalf("mirroring counter %v, want 1", got)
	}
}

func TestBoundedMemory(t *testing.T) {
	f := newFixture(t, Options{MaxObjects: 5, MaxEpisodes: 3, QuietPeriod: time.Hour})
	for i := range 100 {
		at := f.clock.step(time.Second)
		f.d.Observe(f.target, endpoints(fmt.Sprintf("o%d", i), entry(fmt.Sprintf("m%d", i%10), metav1.ManagedFieldsOperationUpdate, "", at, subsets)))
		if len(f.d.seen) > 5 || len(f.d.episodes) > 3 {
			t.Fatalf("after %d objects: %d objects, %d episodes remembered", i+1, len(f.d.seen), len(f.d.episodes))
		}
	}
}

func TestForget(t *testing.T) {
	f := newFixture(t, Options{})
	ep := endpoints("u1", entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", t0, subsets))
	f.d.Observe(f.target, ep)
	f.d.Forget(cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: ep})
	if len(f.d.seen) != 0 {
		t.Fatalf("a deleted object is still remembered")
	}
}

func TestMetricName(t *testing.T) {
	f := newFixture(t, Options{})
	f.d.Track(&Target{Controller: "mirroring"})
	f.d.Observe(f.target, endpoints("u1", entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", t0, subsets)))
	want := `
# HELP kcm_split_foreign_writer_detected_total Episodes in which another field manager (e.g. kube-controller-manager still running this controller) wrote fields this controller owns.
# TYPE kcm_split_foreign_writer_detected_total counter
kcm_split_foreign_writer_detected_total{controller="endpoints"} 1
kcm_split_foreign_writer_detected_total{controller="mirroring"} 0
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), "kcm_split_foreign_writer_detected_total"); err != nil {
		t.Fatal(err)
	}
	metricstest.Lint(t, f.reg)
}

// Register makes every controller's series at 0 when the process starts, before any term's
// Detector: a term's first episode is then an increase from a 0 already scraped, and the
// count goes on across terms on the process's registry.
func TestRegisterStartsTheSeriesAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	Register(reg, "endpoints", "mirroring")
	want := func(endpoints, mirroring int) string {
		return fmt.Sprintf(`
# HELP kcm_split_foreign_writer_detected_total Episodes in which another field manager (e.g. kube-controller-manager still running this controller) wrote fields this controller owns.
# TYPE kcm_split_foreign_writer_detected_total counter
kcm_split_foreign_writer_detected_total{controller="endpoints"} %d
kcm_split_foreign_writer_detected_total{controller="mirroring"} %d
`, endpoints, mirroring)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(0, 0)), "kcm_split_foreign_writer_detected_total"); err != nil {
		t.Fatalf("before any term: %v", err)
	}
	target := &Target{Controller: "endpoints", Fields: [][]string{{"subsets"}}, Recorder: record.NewFakeRecorder(10)}
	for term := 1; term <= 2; term++ {
		d := New(Options{Ours: []string{"endpoints-controller"}, Registerer: reg, Logger: logr.Discard(), Now: func() time.Time { return t0 }})
		d.Observe(d.Track(target), endpoints(fmt.Sprintf("u%d", term), entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", t0.Add(time.Second), subsets)))
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want(term, 0)), "kcm_split_foreign_writer_detected_total"); err != nil {
			t.Fatalf("after term %d's episode: %v", term, err)
		}
	}
}

// TestReportSharesEpisodes: a write found by other means is reported like one found in
// managedFields, once per episode of its manager.
func TestReportSharesEpisodes(t *testing.T) {
	f := newFixture(t, Options{QuietPeriod: time.Minute})
	w := Write{Manager: "unknown", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "finalize", At: f.clock.t}
	f.d.Report(f.target, endpoints("u1"), w)
	f.d.Report(f.target, endpoints("u2"), w)
	if f.count() != 1 {
		t.Fatalf("counter %v after two reports in one episode, want 1", f.count())
	}
	ev := f.events()
	if len(ev) != 1 || !strings.Contains(ev[0], Reason) || !strings.Contains(ev[0], "of finalize") {
		t.Fatalf("events %q, want one %s naming the subresource", ev, Reason)
	}
	f.clock.step(time.Minute)
	f.d.Report(f.target, endpoints("u3"), w)
	if f.count() != 2 {
		t.Fatalf("counter %v after the quiet period, want 2", f.count())
	}
	f.d.Report(f.target, "not an object", w)
	if f.count() != 2 {
		t.Fatalf("counter %v after a report on no object, want 2", f.count())
	}
}

// TestObserveChangeNamesTheOwnersOfChangedFields: only the managers that own a changed field
// now are reported, list items addressed by key; owners of unchanged fields, this
// controller, ignored managers and writes from before the start are not.
func TestObserveChangeNamesTheOwnersOfChangedFields(t *testing.T) {
	f := newFixture(t, Options{})
	ready := `{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:status":{},"f:reason":{}}}}}`
	pressure := `{"f:status":{"f:conditions":{"k:{\"type\":\"MemoryPressure\"}":{"f:status":{}}}}}`
	readyStatus := [][]string{{"status", "conditions", `k:{"type":"Ready"}`, "status"}}
	at := t0.Add(time.Second)
	obj := endpoints("u1",
		entry("endpoints-controller", metav1.ManagedFieldsOperationUpdate, "status", at, ready),
		entry("kube-apiserver", metav1.ManagedFieldsOperationUpdate, "status", at, ready),
		entry("node-problem-detector", metav1.ManagedFieldsOperationUpdate, "status", at, pressure),
		entry("old-kcm", metav1.ManagedFieldsOperationUpdate, "status", t0.Add(-time.Hour), ready))
	if w := f.d.ObserveChange(f.target, obj, readyStatus); len(w) != 0 {
		t.Fatalf("reported %+v: nobody foreign owns the changed field", w)
	}
	obj.ManagedFields = append(obj.ManagedFields, entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "status", at, ready))
	if w := f.d.ObserveChange(f.target, obj, nil); len(w) != 0 {
		t.Fatalf("reported %+v with nothing changed", w)
	}
	w := f.d.ObserveChange(f.target, obj, readyStatus)
	if len(w) != 1 || w[0].Manager != "kube-controller-manager" {
		t.Fatalf("reported %+v, want kube-controller-manager", w)
	}
	if f.count() != 1 || len(f.events()) != 1 {
		t.Fatalf("counter %v, want 1 with one Event", f.count())
	}
	// The same episode: written again, reported no more.
	f.clock.step(time.Minute)
	f.d.ObserveChange(f.target, obj, readyStatus)
	if f.count() != 1 || len(f.events()) != 0 {
		t.Fatalf("counter %v after a second write of the episode, want 1 and no Event", f.count())
	}
}
