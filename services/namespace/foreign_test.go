package namespace

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

func testForeignWriters(t *testing.T) (*foreignWriters, *record.FakeRecorder, func() float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	recorder := record.NewFakeRecorder(10)
	d := foreign.New(foreign.Options{Ours: []string{ControllerID}, Registerer: reg, Logger: logr.Discard()})
	fw := &foreignWriters{d: d, t: d.Track(&foreign.Target{
		Controller: Name,
		Owns:       func(o metav1.Object) bool { return o.GetDeletionTimestamp() != nil },
		Fields:     [][]string{{"status", "conditions"}, {"spec", "finalizers"}},
		Recorder:   recorder,
	})}
	return fw, recorder, func() float64 {
		return fixtures.Counter(t, reg, "kcm_split_foreign_writer_detected_total")
	}
}

// TestFinalizeByAnotherWriterIsReported: a terminating namespace deleted with the
// "kubernetes" finalizer still on it, as last seen, was finalized by someone else, unless
// this controller finalized it; a tombstone proves nothing.
func TestFinalizeByAnotherWriterIsReported(t *testing.T) {
	f := newFixture(t, coreDiscovery, terminating("ours", "uid-ours"))
	fw, recorder, count := testForeignWriters(t)
	f.c.foreign = fw

	// Ours: finalized by this controller, then deleted.
	if err := f.sync("ours"); err != nil {
		t.Fatal(err)
	}
	f.c.onDelete(terminating("ours", "uid-ours"))
	// A tombstone with the finalizer: its state may be older than the finalize.
	f.c.onDelete(cache.DeletedFinalStateUnknown{Key: "x", Obj: terminating("x", "uid-x")})
	// Deleted after a finalize that is not in the state (no finalizer left): nothing to say.
	done := terminating("y", "uid-y")
	done.Spec.Finalizers = nil
	f.c.onDelete(done)
	if n := count(); n != 0 {
		t.Fatalf("counter %v, want 0: %q", n, fixtures.Events(recorder))
	}

	// Someone else's finalize.
	f.c.onDelete(terminating("theirs", "uid-theirs"))
	if n := count(); n != 1 {
		t.Fatalf("counter %v, want 1", n)
	}
	ev := fixtures.Events(recorder)
	if len(ev) != 1 || !strings.Contains(ev[0], foreign.Reason) || !strings.Contains(ev[0], "of finalize") {
		t.Fatalf("events %q, want one %s of finalize", ev, foreign.Reason)
	}
	f.c.mu.Lock()
	left := len(f.c.finalizing)
	f.c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d namespaces still marked finalizing after their deletion", left)
	}
}

// TestConditionsByAnotherManagerAreReported: another field manager writing the conditions of
// a terminating namespace is reported; the same on a live namespace, or by this controller,
// is not.
func TestConditionsByAnotherManagerAreReported(t *testing.T) {
	fw, recorder, count := testForeignWriters(t)
	conditions := metav1.NewFieldsV1(`{"f:status":{"f:conditions":{".":{}}}}`)
	ns := func(manager string, deleting bool) *v1.Namespace {
		n := terminating("n-"+manager, types.UID("uid-"+manager))
		if !deleting {
			n.DeletionTimestamp = nil
		}
		n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
			Time: &metav1.Time{Time: time.Now().Add(time.Second)}, FieldsType: "FieldsV1", FieldsV1: conditions}}
		return n
	}
	for _, obj := range []*v1.Namespace{ns(ControllerID, true), ns("kube-controller-manager", false)} {
		out, err := fw.transform(obj)
		if err != nil || len(out.(*v1.Namespace).ManagedFields) != 0 {
			t.Fatalf("transform kept managedFields (%v)", err)
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("counter %v, want 0: %q", n, fixtures.Events(recorder))
	}
	if _, err := fw.transform(ns("kube-controller-manager", true)); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("counter %v, want 1", n)
	}
	if ev := fixtures.Events(recorder); len(ev) != 1 || !strings.Contains(ev[0], "kube-controller-manager") {
		t.Fatalf("events %q, want one naming kube-controller-manager", ev)
	}
}
