package nodelifecycle

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

// fixture is a controller over a fake clientset with a fake clock; the test feeds the
// informer caches by hand and calls checkAllNodes, syncs and the tainter directly.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	recorder *record.FakeRecorder
	c        *Controller
	clock    *fakeClock
	nodes    cache.Indexer
	leases   cache.Indexer
	pods     cache.Indexer
	reg      *prometheus.Registry
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, opts Options, objs ...runtime.Object) *fixture {
	t.Helper()
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	f := &fixture{
		t: t, client: client, recorder: record.NewFakeRecorder(1000), clock: &fakeClock{t: t0}, reg: prometheus.NewRegistry(),
		nodes:  factory.Core().V1().Nodes().Informer().GetIndexer(),
		leases: factory.Coordination().V1().Leases().Informer().GetIndexer(),
	}
	f.c = New(factory.Core().V1().Nodes(), factory.Coordination().V1().Leases(), factory.Core().V1().Pods(),
		client, f.recorder, opts, f.reg)
	f.c.now = f.clock.now
	f.pods = f.c.podsByNode
	t.Cleanup(func() {
		f.c.nodeQueue.ShutDown()
		f.c.podQueue.ShutDown()
	})
	f.cache(objs...)
	return f
}

// cache puts objects into the informer caches and tells the health tracker, as the
// informers' handlers would.
func (f *fixture) cache(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		var err error
		switch obj := o.(type) {
		case *v1.Node:
			err = f.nodes.Update(obj)
			f.c.health.observeNode(obj)
		case *v1.Pod:
			err = f.pods.Update(obj)
		default:
			continue
		}
		if err != nil {
			f.t.Fatal(err)
		}
	}
}

// refresh copies the Nodes as stored in the fake clientset into the cache.
func (f *fixture) refresh() {
	f.t.Helper()
	list, err := f.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for i := range list.Items {
		f.cache(&list.Items[i])
	}
}

func (f *fixture) stored(name string) *v1.Node {
	f.t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// writes returns the write actions so far as "verb resource[/subresource] name".
func (f *fixture) writes() []string { return fixtures.WriteLines(f.client.Actions()) }

// events drains the recorded events.
func (f *fixture) events() []string { return fixtures.Events(f.recorder) }

func hasEvent(evs []string, substr string) bool {
	return slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, substr) })
}

func readyNode(name, zone string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour)),
			Labels: map[string]string{v1.LabelTopologyRegion: "r", v1.LabelTopologyZone: zone}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
			{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(t0)},
			{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse},
			{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse},
		}},
	}
}

func fastOptions() Options {
	o := DefaultOptions()
	o.MonitorPeriod, o.MonitorGracePeriod, o.StartupGracePeriod = time.Second, 10*time.Second, 20*time.Second
	return o
}

// The reconcile metrics carry upstream's name of the controller, the value --controllers takes.
func TestReconcileMetricsCarryUpstreamName(t *testing.T) {
	f := newFixture(t, fastOptions())
	if got := metricstest.LabelValues(t, f.reg, "kcm_split_reconcile_total", "controller"); got != Name {
		t.Fatalf("controller label %q, want %q", got, Name)
	}
}
