package quota

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

var widgetsResource = schema.GroupResource{Group: "example.com", Resource: "widgets"}

type fixture struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	c        *Controller
	recorder *record.FakeRecorder
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
	c := New(factory.Core().V1().ResourceQuotas(), client, meta, discover, rec, opts, prometheus.NewRegistry())
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
	return &fixture{t: t, ctx: ctx, client: client, c: c, recorder: rec}
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

// TestSyncsOfOneQuotaAreSerialised: while a quota's lock is held (a sync from the other
// queue), a second sync of it waits and writes nothing; a sync of another quota goes ahead.
func TestSyncsOfOneQuotaAreSerialised(t *testing.T) {
	f := newFixture(t, quotaObj("ns", "q", rl("pods", "5")), quotaObj("ns", "other", rl("pods", "5")), namedPod("ns", "a"))
	f.c.startMonitors(f.ctx)
	if err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, st, _ := f.c.monitors.getOrStart(podsResource)
		return st == stateSynced, nil
	}); err != nil {
		t.Fatal("pods never synced")
	}
	f.c.locks.LockKey("ns/q")
	done := make(chan error, 1)
	go func() { done <- f.c.syncQuota(f.ctx, "ns/q") }()

	other := make(chan error, 1)
	go func() { other <- f.c.syncQuota(f.ctx, "ns/other") }()
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("sync ns/other: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a sync of ns/other waited for the lock of ns/q")
	}
	checkUsage(t, f.stored("ns", "other").Status.Used, map[string]string{"pods": "1"})
	select {
	case err := <-done:
		t.Fatalf("a sync of ns/q ran while its lock was held (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	if used := f.stored("ns", "q").Status.Used; len(used) != 0 {
		t.Fatalf("ns/q written (%v) while its lock was held", used)
	}
	if err := f.c.locks.UnlockKey("ns/q"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("sync ns/q: %v", err)
	}
	checkUsage(t, f.stored("ns", "q").Status.Used, map[string]string{"pods": "1"})
}

func TestSyncWritesOnceThenNothing(t *testing.T) {
	f := newFixture(t,
		quotaObj("ns", "q", rl("pods", "10", "requests.cpu", "4", "count/pods", "10")),
		namedPod("ns", "a", containers(container("c", rl("cpu", "500m"), nil))),
		namedPod("ns", "b", containers(container("c", rl("cpu", "1"), nil)), phase(v1.PodFailed)),
		namedPod("other", "c", containers(container("c", rl("cpu", "1"), nil))),
	)
	if err := f.sync("ns/q"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 1 || w[0] != "update resourcequotas/status" {
		t.Fatalf("writes = %v, want one status update", w)
	}
	rq := f.stored("ns", "q")
	checkUsage(t, rq.Status.Used, map[string]string{"pods": "1", "requests.cpu": "500m", "count/pods": "2"})
	checkUsage(t, rq.Status.Hard, map[string]string{"pods": "10", "requests.cpu": "4"})

	f.catchUp("ns", "q")
	f.client.ClearActions()
	if err := f.sync("ns/q"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("resync over unchanged usage wrote %v", w)
	}
	if got := testutil.ToFloat64(f.c.metrics.syncs.WithLabelValues(OutcomeUnchanged)); got != 1 {
		t.Fatalf("unchanged syncs = %v, want 1", got)
	}
}

func TestReplenishOnlyQuotasTrackingTheResourceInItsNamespace(t *testing.T) {
	f := newFixture(t,
		quotaObj("ns", "pods", rl("pods", "10")),
		quotaObj("ns", "cpu", rl("requests.cpu", "10")),
		quotaObj("ns", "maps", rl("configmaps", "10")),
		quotaObj("other", "pods", rl("pods", "10")),
	)
	f.drain()
	h := f.c.replenishmentHandler(podsResource)
	running := namedPod("ns", "p", containers(container("c", rl("cpu", "1"), nil)))

	h.OnDelete(running)
	prio, prim := f.drain()
	if strings.Join(prio, ",") != "ns/pods,ns/cpu" && strings.Join(prio, ",") != "ns/cpu,ns/pods" || len(prim) != 0 {
		t.Fatalf("delete queued priority=%v primary=%v, want ns/pods and ns/cpu in priority", prio, prim)
	}
	h.OnDelete(cacheTombstone(running))
	if prio, _ := f.drain(); len(prio) != 2 {
		t.Fatalf("tombstone queued %v", prio)
	}

	relabeled := running.DeepCopy()
	relabeled.Labels = map[string]string{"a": "b"}
	h.OnUpdate(running, relabeled)
	if prio, prim := f.drain(); len(prio)+len(prim) != 0 {
		t.Fatalf("a label change queued %v %v", prio, prim)
	}
	failed := running.DeepCopy()
	failed.Status.Phase = v1.PodFailed
	h.OnUpdate(running, failed)
	if prio, _ := f.drain(); len(prio) != 2 {
		t.Fatalf("turning Failed queued %v", prio)
	}
	// Creations are charged by admission: nothing to do.
	h.OnAdd(running, false)
	if prio, prim := f.drain(); len(prio)+len(prim) != 0 {
		t.Fatalf("a create queued %v %v", prio, prim)
	}
}

func TestQuotaHandlers(t *testing.T) {
	synced := quotaObj("ns", "q", rl("pods", "1"))
	synced.Status = v1.ResourceQuotaStatus{Hard: rl("pods", "1"), Used: rl("pods", "0")}
	f := newFixture(t, synced, quotaObj("ns", "new", rl("pods", "1")))
	prio, prim := f.drain()
	if strings.Join(prio, ",") != "ns/new" || strings.Join(prim, ",") != "ns/q" {
		t.Fatalf("initial adds: priority=%v primary=%v", prio, prim)
	}
	statusOnly := synced.DeepCopy()
	statusOnly.Status.Used = rl("pods", "1")
	f.c.onQuotaUpdate(synced, statusOnly)
	if prio, prim := f.drain(); len(prio)+len(prim) != 0 {
		t.Fatalf("a status update queued %v %v", prio, prim)
	}
	edited := synced.DeepCopy()
	edited.Spec.Hard = rl("pods", "2")
	f.c.onQuotaUpdate(synced, edited)
	if prio, _ := f.drain(); strings.Join(prio, ",") != "ns/q" {
		t.Fatalf("a spec.hard edit queued %v, want ns/q in priority", prio)
	}
}

func TestUncountableTypeKeepsLastValuePublishesTheRestAndWarnsOnce(t *testing.T) {
	rq := quotaObj("ns", "q", rl("pods", "5", "count/widgets.example.com", "5"))
	rq.Status = v1.ResourceQuotaStatus{Hard: rl("pods", "5", "count/widgets.example.com", "5"), Used: rl("pods", "0", "count/widgets.example.com", "2")}
	f := newFixture(t, rq, namedPod("ns", "a"))
	if err := f.sync("ns/q"); err != nil {
		t.Fatal(err)
	}
	got := f.stored("ns", "q")
	checkUsage(t, got.Status.Used, map[string]string{"pods": "1", "count/widgets.example.com": "2"})
	if len(f.recorder.Events) != 1 {
		t.Fatalf("%d events, want 1", len(f.recorder.Events))
	}
	ev := <-f.recorder.Events
	if !strings.Contains(ev, ReasonCannotCount) || !strings.Contains(ev, "widgets.example.com") {
		t.Fatalf("event %q does not name the resource", ev)
	}
	if got := testutil.ToFloat64(f.c.metrics.syncs.WithLabelValues(OutcomePartial)); got != 1 {
		t.Fatalf("partial syncs = %v, want 1", got)
	}
	if f.c.monitors.failing.Load() != 1 {
		t.Fatalf("failing types = %d, want 1", f.c.monitors.failing.Load())
	}
	f.catchUp("ns", "q")
	f.client.ClearActions()
	if err := f.sync("ns/q"); err != nil {
		t.Fatal(err)
	}
	if len(f.recorder.Events) != 0 || len(f.writes()) != 0 {
		t.Fatalf("second sync: %d more events, writes %v; want none", len(f.recorder.Events), f.writes())
	}
}

func TestDeletingPodIsRecheckedWhenItsGracePeriodEnds(t *testing.T) {
	now := time.Now()
	f := newFixture(t,
		quotaObj("ns", "q", rl("pods", "5")),
		namedPod("ns", "a", func(p *v1.Pod) {
			p.DeletionTimestamp = &metav1.Time{Time: now}
			p.DeletionGracePeriodSeconds = new(int64(30))
		}),
	)
	f.c.now = func() time.Time { return now }
	err := f.sync("ns/q")
	if err == nil || !strings.Contains(err.Error(), "requeue after 30") {
		t.Fatalf("sync = %v, want a requeue after the grace period", err)
	}
	f.c.now = func() time.Time { return now.Add(31 * time.Second) }
	f.catchUp("ns", "q")
	if err := f.sync("ns/q"); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, f.stored("ns", "q").Status.Used, map[string]string{"pods": "0"})
}

func cacheTombstone(obj any) any {
	return cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: obj}
}

func TestQuotaWaitsForATypeStillListing(t *testing.T) {
	rq := quotaObj("ns", "q", rl("pods", "5", "count/widgets.example.com", "5"))
	f := newFixtureWithTimeout(t, time.Hour, rq)
	f.c.startMonitors(f.ctx)
	// widgets never lists (the fake's list fails) and the timeout is far away: still starting.
	if err := f.c.syncQuota(f.ctx, "ns/q"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("a quota whose type is still listing was written: %v", w)
	}
	if got := testutil.ToFloat64(f.c.metrics.syncs.WithLabelValues(OutcomeDeferred)); got != 1 {
		t.Fatalf("deferred syncs = %v, want 1", got)
	}
	// A quota that does not count widgets is not held back.
	other := quotaObj("ns", "pods", rl("pods", "5"))
	if _, err := f.client.CoreV1().ResourceQuotas("ns").Create(f.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.catchUp("ns", "pods")
	if err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, st, _ := f.c.monitors.getOrStart(podsResource)
		return st == stateSynced, nil
	}); err != nil {
		t.Fatal("pods never synced")
	}
	if err := f.c.syncQuota(f.ctx, "ns/pods"); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, f.stored("ns", "pods").Status.Used, map[string]string{"pods": "0"})
}

func TestInformersOfUntrackedTypesStop(t *testing.T) {
	f := newFixture(t, quotaObj("ns", "q", rl("pods", "5", "services", "5")))
	f.c.startMonitors(f.ctx)
	running := func() []schema.GroupResource {
		f.c.monitors.mu.Lock()
		defer f.c.monitors.mu.Unlock()
		var out []schema.GroupResource
		for gr := range f.c.monitors.byGR {
			out = append(out, gr)
		}
		return out
	}
	if got := running(); len(got) != 2 {
		t.Fatalf("running %v, want pods and services", got)
	}
	rq := f.stored("ns", "q")
	rq.Spec.Hard = rl("pods", "5")
	if _, err := f.client.CoreV1().ResourceQuotas("ns").Update(f.ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.catchUp("ns", "q")
	f.c.stopUnneededMonitors(f.ctx)
	if got := running(); len(got) != 1 || got[0] != podsResource {
		t.Fatalf("running %v, want only pods", got)
	}
}

// Where the apiserver serves no ResourceClaims, an extended resource is the Pods' alone, as
// upstream registers no claim evaluator there: counted, no warning, no early recheck.
func TestExtendedResourceWithoutResourceClaimsServed(t *testing.T) {
	rq := quotaObj("ns", "q", rl("requests.example.com/gpu", "5"))
	f := newFixture(t, rq, namedPod("ns", "a", containers(container("c", rl("example.com/gpu", "2"), rl("example.com/gpu", "2")))))
	if err := f.sync("ns/q"); err != nil {
		t.Fatalf("sync: %v, want no error and no recheck", err)
	}
	checkUsage(t, f.stored("ns", "q").Status.Used, map[string]string{"requests.example.com/gpu": "2"})
	if len(f.recorder.Events) != 0 {
		t.Fatalf("events: %v", <-f.recorder.Events)
	}
}

// Pods and claims both charge a class's extended resource: status.used is their sum. When
// claims cannot be listed, the name keeps its last value, though Pods could be counted.
func TestPodsAndClaimsAddUp(t *testing.T) {
	served := map[schema.GroupResource]string{claimsResource: "v1"}
	gpuPod := namedPod("ns", "a", containers(container("c", rl("example.com/gpu", "1"), rl("example.com/gpu", "1"))))
	c := claim("c", exact("gold", exactCount, 2))
	objs := func() []runtime.Object {
		return []runtime.Object{
			quotaObj("ns", "q", rl("requests.example.com/gpu", "10", "gold.deviceclass.resource.k8s.io/devices", "10", "pods", "10")),
			gpuPod.DeepCopy(), c.DeepCopy(), deviceClass("gold", "example.com/gpu"),
		}
	}
	t.Run("summed", func(t *testing.T) {
		f := newFixtureWith(t, 300*time.Millisecond, served, nil, objs()...)
		if err := f.sync("ns/q"); err != nil {
			t.Fatal(err)
		}
		checkUsage(t, f.stored("ns", "q").Status.Used, map[string]string{
			"requests.example.com/gpu": "3", "gold.deviceclass.resource.k8s.io/devices": "2", "pods": "1",
		})
	})
	t.Run("claims cannot be listed", func(t *testing.T) {
		o := objs()
		rq := o[0].(*v1.ResourceQuota)
		rq.Status = v1.ResourceQuotaStatus{Hard: rq.Spec.Hard, Used: rl("requests.example.com/gpu", "7", "gold.deviceclass.resource.k8s.io/devices", "7", "pods", "0")}
		f := newFixtureWith(t, 300*time.Millisecond, served, func(c *fake.Clientset) {
			c.PrependReactor("list", "resourceclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("forbidden")
			})
		}, o...)
		if err := f.sync("ns/q"); err != nil {
			t.Fatal(err)
		}
		checkUsage(t, f.stored("ns", "q").Status.Used, map[string]string{
			"requests.example.com/gpu": "7", "gold.deviceclass.resource.k8s.io/devices": "7", "pods": "1",
		})
		if len(f.recorder.Events) != 1 {
			t.Fatalf("%d events, want 1 about resourceclaims", len(f.recorder.Events))
		}
	})
	t.Run("DRAExtendedResource off: devices only", func(t *testing.T) {
		f := newFixtureWith(t, 300*time.Millisecond, served, nil, objs()...)
		f.c.opts.Claims.ExtendedResources = false
		f.c.monitors.claims.ExtendedResources = false
		if err := f.sync("ns/q"); err != nil {
			t.Fatal(err)
		}
		checkUsage(t, f.stored("ns", "q").Status.Used, map[string]string{
			"requests.example.com/gpu": "1", "gold.deviceclass.resource.k8s.io/devices": "2",
		})
	})
}

// TestPodsListWhileDiscoveryAnswers: on start the core types' informers (the Pods, the longest
// list) do not wait for discovery, and the types only discovery places start once it answers.
func TestPodsListWhileDiscoveryAnswers(t *testing.T) {
	rq := quotaObj("ns", "q", rl("pods", "5", "count/widgets.example.com", "5"))
	client := fake.NewClientset(rq, namedPod("ns", "a"))
	podsListed := make(chan struct{})
	var once sync.Once
	client.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(podsListed) })
		return false, nil, nil
	})
	discover := func() (map[schema.GroupResource]string, map[string]string, error) {
		select {
		case <-podsListed:
			return map[schema.GroupResource]string{widgetsResource: "v1"}, nil, nil
		case <-time.After(10 * time.Second):
			return nil, nil, errors.New("the Pods were not listed while discovery was pending")
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	meta := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	c := New(factory.Core().V1().ResourceQuotas(), client, meta, discover, record.NewFakeRecorder(100), DefaultOptions(), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		factory.Shutdown()
	}()
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return c.HasSynced(), nil
	}); err != nil {
		t.Fatal("the controller never warmed up")
	}
	c.monitors.mu.Lock()
	_, pods := c.monitors.byGR[podsResource]
	_, widgets := c.monitors.byGR[widgetsResource]
	c.monitors.mu.Unlock()
	if !pods || !widgets {
		t.Errorf("informers started: pods %v, widgets.example.com %v; want both", pods, widgets)
	}
	if _, _, reason := c.monitors.getOrStart(widgetsResource); strings.Contains(reason, "does not serve") {
		t.Errorf("widgets.example.com is still unknown after discovery: %s", reason)
	}
}
