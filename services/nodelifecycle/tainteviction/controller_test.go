package tainteviction

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

// fixture is a controller over a fake clientset with a fake clock; the test puts objects
// into the informer caches and calls decide and evict directly.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	recorder *record.FakeRecorder
	c        *Controller
	clock    time.Time
	reg      *prometheus.Registry
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	f := &fixture{t: t, client: client, recorder: record.NewFakeRecorder(1000), clock: t0, reg: prometheus.NewRegistry()}
	f.c = New(factory.Core().V1().Nodes(), factory.Core().V1().Pods(), client, f.recorder, f.reg)
	f.c.now = func() time.Time { return f.clock }
	t.Cleanup(func() {
		f.c.nodeQueue.ShutDown()
		f.c.podQueue.ShutDown()
		f.c.evictQueue.ShutDown()
	})
	nodes := factory.Core().V1().Nodes().Informer().GetIndexer()
	for _, o := range objs {
		var err error
		switch obj := o.(type) {
		case *v1.Node:
			err = nodes.Add(obj)
		case *v1.Pod:
			err = f.c.podsByNode.Add(obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) step(d time.Duration) { f.clock = f.clock.Add(d) }

// writes returns the write actions so far as "verb resource[/subresource] name".
func (f *fixture) writes() []string { return fixtures.WriteLines(f.client.Actions()) }

func hasEvent(evs []string, substr string) bool {
	return slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, substr) })
}

// taintedNode is a Node n with the unreachable NoExecute taint.
func taintedNode() *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "uid-n"}, Spec: v1.NodeSpec{Taints: []v1.Taint{unreachableTaint}}}
}

// The reconcile metrics carry upstream's name of the controller, the value --controllers takes.
func TestReconcileMetricsCarryUpstreamName(t *testing.T) {
	f := newFixture(t)
	if got := metricstest.LabelValues(t, f.reg, "kcm_split_reconcile_total", "controller"); got != Name {
		t.Fatalf("controller label %q, want %q", got, Name)
	}
}
