package quota

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

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

// TestUncountableNamedOnQuotaAndStaleness: a quota with a type that cannot be counted gets
// the names it keeps stale in AnnUncountable and a staleness that grows; once it counts only
// what can be counted, the annotation goes and the clock restarts.
func TestUncountableNamedOnQuotaAndStaleness(t *testing.T) {
	rq := quotaObj("ns", "q", rl("pods", "5", "count/widgets.example.com", "5"))
	rq.Annotations = map[string]string{"keep": "me"}
	f := newFixture(t, rq, namedPod("ns", "a"))
	t0 := time.Now()
	f.c.now = func() time.Time { return t0 }
	if err := f.sync("ns/q"); err != nil {
		t.Fatal(err)
	}
	got := f.stored("ns", "q")
	if v := got.Annotations[AnnUncountable]; v != "count/widgets.example.com" {
		t.Fatalf("%s = %q, want the widgets count named", AnnUncountable, v)
	}
	if got.Annotations["keep"] != "me" {
		t.Fatalf("other annotations lost: %v", got.Annotations)
	}
	f.c.now = func() time.Time { return t0.Add(90 * time.Second) }
	if v := testutil.ToFloat64(f.c.staleness); v != 90 {
		t.Fatalf("staleness = %v, want 90", v)
	}

	// A second partial sync writes nothing and does not restart the clock.
	f.catchUp("ns", "q")
	f.client.ClearActions()
	if err := f.sync("ns/q"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("unchanged partial sync wrote %v", w)
	}
	if v := testutil.ToFloat64(f.c.staleness); v != 90 {
		t.Fatalf("staleness after a partial sync = %v, want 90", v)
	}

	// The widgets limit is dropped: everything left is counted.
	got = f.stored("ns", "q")
	got.Spec.Hard = rl("pods", "5")
	if _, err := f.client.CoreV1().ResourceQuotas("ns").Update(f.ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.catchUp("ns", "q")
	if err := f.sync("ns/q"); err != nil {
		t.Fatal(err)
	}
	got = f.stored("ns", "q")
	if _, ok := got.Annotations[AnnUncountable]; ok || got.Annotations["keep"] != "me" {
		t.Fatalf("annotations after a full count = %v, want only keep=me", got.Annotations)
	}
	if v := testutil.ToFloat64(f.c.staleness); v != 0 {
		t.Fatalf("staleness after a full count = %v, want 0", v)
	}

	// Deleted: its series goes.
	if err := f.client.CoreV1().ResourceQuotas("ns").Delete(f.ctx, "q", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return testutil.CollectAndCount(f.c.staleness) == 0, nil
	}); err != nil {
		t.Fatal("the deleted quota's staleness series was not dropped")
	}
}

// TestUncountableAnnotationOff: with the annotation turned off nothing is added, and one an
// earlier run left is removed.
func TestUncountableAnnotationOff(t *testing.T) {
	rq := quotaObj("ns", "q", rl("pods", "5", "count/widgets.example.com", "5"))
	rq.Annotations = map[string]string{AnnUncountable: "count/widgets.example.com"}
	f := newFixture(t, rq, namedPod("ns", "a"))
	f.c.opts.UncountableAnnotation = false
	if err := f.sync("ns/q"); err != nil {
		t.Fatal(err)
	}
	if got := f.stored("ns", "q"); len(got.Annotations) != 0 {
		t.Fatalf("annotations = %v, want none", got.Annotations)
	}
}
