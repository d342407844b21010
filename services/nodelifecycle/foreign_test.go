package nodelifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

const (
	taintsField = `{"f:spec":{"f:taints":{}}}`
	readyField  = `{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:status":{},"f:reason":{},"f:message":{}}}}}`
)

// foreignFixture is a detector on a Node cache holding the previous versions.
type foreignFixture struct {
	fw       *foreignWriters
	store    cache.Store
	recorder *record.FakeRecorder
	reg      *prometheus.Registry
}

func newForeignFixture(t *testing.T) *foreignFixture {
	t.Helper()
	f := &foreignFixture{store: cache.NewStore(cache.MetaNamespaceKeyFunc), recorder: record.NewFakeRecorder(10), reg: prometheus.NewRegistry()}
	d := foreign.New(foreign.Options{Ours: []string{ControllerID}, Ignored: append(foreign.IgnoredManagers(), KubeletManager),
		Registerer: f.reg, Logger: logr.Discard()})
	f.fw = &foreignWriters{d: d, t: d.Track(&foreign.Target{Controller: Name, Recorder: f.recorder}), nodes: f.store}
	return f
}

// write shows the new version of a Node, written by manager (fields), to the transform and
// caches what it returns, as the informer does.
func (f *foreignFixture) write(t *testing.T, node *v1.Node, manager, fields string) {
	t.Helper()
	node = node.DeepCopy()
	node.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate,
		Time: &metav1.Time{Time: time.Now().Add(time.Second)}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}}
	out, err := f.fw.transform(node)
	if err != nil {
		t.Fatal(err)
	}
	if n := out.(*v1.Node); len(n.ManagedFields) != 0 {
		t.Fatal("the transform kept managedFields in the cache")
	}
	if err := f.store.Add(out); err != nil {
		t.Fatal(err)
	}
}

func (f *foreignFixture) count(t *testing.T) float64 {
	t.Helper()
	return fixtures.Counter(t, f.reg, "kcm_split_foreign_writer_detected_total")
}

func (f *foreignFixture) events() []string { return fixtures.Events(f.recorder) }

func foreignNode(taints []v1.Taint, ready v1.ConditionStatus, reason string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"},
		Spec:   v1.NodeSpec{Taints: taints},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: ready, Reason: reason}}}}
}

// TestForeignTaintsAreReported: a change of this controller's taints made by another field
// manager is reported once; the taints a Node was created with, other taints written by
// others (the atomic list is then theirs) and this controller's own changes are not.
func TestForeignTaintsAreReported(t *testing.T) {
	f := newForeignFixture(t)
	notReady := v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule}
	dedicated := v1.Taint{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}
	unreachable := []v1.Taint{{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoSchedule}, unreachableTaint}

	// Registered by its kubelet-like creator with admission's not-ready taint: first seen.
	f.write(t, foreignNode([]v1.Taint{notReady}, v1.ConditionTrue, "KubeletReady"), "kubectl-create", taintsField)
	// This controller lifts it.
	f.write(t, foreignNode(nil, v1.ConditionTrue, "KubeletReady"), ControllerID, taintsField)
	// kubectl taint adds another taint: the list is kubectl's now, but no taint of ours moved.
	f.write(t, foreignNode([]v1.Taint{dedicated}, v1.ConditionTrue, "KubeletReady"), "kubectl-taint", taintsField)
	if n := f.count(t); n != 0 {
		t.Fatalf("counter %v, want 0: %q", n, f.events())
	}
	// kube-controller-manager taints it unreachable.
	f.write(t, foreignNode(append([]v1.Taint{dedicated}, unreachable...), v1.ConditionTrue, "KubeletReady"), "kube-controller-manager", taintsField)
	if n := f.count(t); n != 1 {
		t.Fatalf("counter %v, want 1", n)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], foreign.Reason) || !strings.Contains(ev[0], "kube-controller-manager") {
		t.Fatalf("events %q, want one %s naming kube-controller-manager", ev, foreign.Reason)
	}
	// The same order, reordered by someone: no taint of ours moved.
	f.write(t, foreignNode(append([]v1.Taint{unreachable[1], unreachable[0]}, dedicated), v1.ConditionTrue, "KubeletReady"), "someone", taintsField)
	if n := f.count(t); n != 1 {
		t.Fatalf("counter %v after a reorder, want 1", n)
	}
}

// TestForeignConditionsAreReported: a Ready condition marked Unknown by another field
// manager is reported; the kubelet's writes and this controller's are not.
func TestForeignConditionsAreReported(t *testing.T) {
	f := newForeignFixture(t)
	f.write(t, foreignNode(nil, v1.ConditionTrue, "KubeletReady"), KubeletManager, readyField)
	f.write(t, foreignNode(nil, v1.ConditionUnknown, reasonStatusUnknown), ControllerID, readyField)
	f.write(t, foreignNode(nil, v1.ConditionTrue, "KubeletReady"), KubeletManager, readyField)
	// Another manager writes an unrelated field: the Ready condition did not move.
	f.write(t, foreignNode(nil, v1.ConditionTrue, "KubeletReady"), "kube-controller-manager", `{"f:metadata":{"f:labels":{}}}`)
	if n := f.count(t); n != 0 {
		t.Fatalf("counter %v, want 0: %q", n, f.events())
	}
	f.write(t, foreignNode(nil, v1.ConditionUnknown, reasonStatusUnknown), "kube-controller-manager", readyField)
	if n := f.count(t); n != 1 {
		t.Fatalf("counter %v, want 1", n)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], "kube-controller-manager") {
		t.Fatalf("events %q, want one naming kube-controller-manager", ev)
	}
}
