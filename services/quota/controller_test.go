package quota

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

var widgetsResource = schema.GroupResource{Group: "example.com", Resource: "widgets"}

type fixture struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	c        *Controller
	recorder *record.FakeRecorder
	reg      *prometheus.Registry
}

// newFixture runs the controller's informers over a fake clientset, without workers: tests
// call syncQuota and the handlers directly. Listing widgets.example.com always fails (the
// metadata fake's list fails), which makes it a type that cannot be counted.
func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	return newFixtureWithTimeout(t, 300*time.Millisecond, objs...)
}

func newFixtureWithTimeout(t *testing.T, timeout time.Duration, objs ...runtime.Object) *fixture {
	t.Helper()
	return newFixtureWith(t, timeout, nil, nil, objs...)
}

// newFixtureWith also discovers the types in served, and lets prepare add reactors to the
// clientset before any informer starts.
func newFixtureWith(t *testing.T, timeout time.Duration, served map[schema.GroupResource]string, prepare func(*fake.Clientset), objs ...runtime.Object) *fixture {
	t.Helper()
	client := fake.NewClientset(objs...)
	if prepare != nil {
		prepare(client)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	meta := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	meta.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("conversion webhook for example.com/v1, Kind=Widget failed: connection refused")
	})
	discover := func() (map[schema.GroupResource]string, map[string]string, error) {
		found := map[schema.GroupResource]string{widgetsResource: "v1"}
		for gr, v := range served {
			found[gr] = v
		}
		return found, nil, nil
	}
	rec := record.NewFakeRecorder(100)
	opts := DefaultOptions()
	opts.InformerSyncTimeout = timeout
	reg := prometheus.NewRegistry()
	c := New(factory.Core().V1().ResourceQuotas(), client, meta, discover, rec, opts, reg)
	ctx, cancel := context.WithCancel(context.Background())
	c.monitors.ctx = ctx
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	c.rediscover(ctx)
	// The handlers, not only the informer, must have seen every quota.
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.handlers.HasSynced(), nil
	}); err != nil {
		t.Fatal("quota handler never synced")
	}
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		c.monitors.wait()
		c.primary.ShutDown()
		c.priority.ShutDown()
	})
	return &fixture{t: t, ctx: ctx, client: client, c: c, recorder: rec, reg: reg}
}

// sync starts the informers the quotas need, waits until each has synced or given up (as the
// controller's own re-queue would), then syncs key.
func (f *fixture) sync(key string) error {
	f.t.Helper()
	f.c.startMonitors(f.ctx)
	err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		f.c.monitors.mu.Lock()
		defer f.c.monitors.mu.Unlock()
		for _, m := range f.c.monitors.byGR {
			if m.state() == stateStarting {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		f.t.Fatal("informers never settled")
	}
	return f.c.syncQuota(f.ctx, key)
}

func (f *fixture) writes() []string {
	var out []string
	for _, a := range fixtures.Writes(f.client.Actions()) {
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
	}
	return out
}

func (f *fixture) stored(ns, name string) *v1.ResourceQuota {
	f.t.Helper()
	rq, err := f.client.CoreV1().ResourceQuotas(ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return rq
}

// catchUp waits until the quota lister holds what the fake apiserver stores.
func (f *fixture) catchUp(ns, name string) {
	f.t.Helper()
	// The fake clientset does not bump resourceVersions: compare what matters.
	want := f.stored(ns, name)
	err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		rq, err := f.c.quotas.ResourceQuotas(ns).Get(name)
		return err == nil && apiequality.Semantic.DeepEqual(rq.Spec, want.Spec) && apiequality.Semantic.DeepEqual(rq.Status, want.Status), nil
	})
	if err != nil {
		f.t.Fatal("quota informer did not catch up")
	}
}

// drain empties both queues and returns what they held.
func (f *fixture) drain() (priority, primary []string) {
	return fixtures.Drain(f.c.priority), fixtures.Drain(f.c.primary)
}

func quotaObj(ns, name string, hard v1.ResourceList) *v1.ResourceQuota {
	return &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"}, Spec: v1.ResourceQuotaSpec{Hard: hard}}
}

func namedPod(ns, name string, opts ...func(*v1.Pod)) *v1.Pod {
	p := pod(opts...)
	p.Namespace, p.Name = ns, name
	return p
}

// The reconcile metrics carry upstream's name of the controller, the value --controllers takes.
func TestReconcileMetricsCarryUpstreamName(t *testing.T) {
	f := newFixture(t)
	if got := metricstest.LabelValues(t, f.reg, "kcm_split_reconcile_total", "controller"); got != Name {
		t.Fatalf("controller label %q, want %q", got, Name)
	}
}
