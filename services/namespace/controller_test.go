package namespace

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/metrics/metricstest"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
	"github.com/kcm-split/kcm-split/shared/worker"
)

var secrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// coreDiscovery is what discovery returns in these tests: Pods, ConfigMaps, Secrets.
func coreDiscovery() ([]*metav1.APIResourceList, error) {
	return []*metav1.APIResourceList{{
		GroupVersion: "v1",
		APIResources: []metav1.APIResource{
			{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: allVerbs},
			{Name: "pods/status", Namespaced: true, Kind: "Pod", Verbs: []string{"get", "patch", "update"}},
			{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: allVerbs},
			{Name: "secrets", Namespaced: true, Kind: "Secret", Verbs: allVerbs},
			{Name: "bindings", Namespaced: true, Verbs: []string{"create"}},
		},
	}}, nil
}

func terminating(name string, uid types.UID) *v1.Namespace {
	ts := metav1.NewTime(time.Now().Add(-time.Minute))
	return &v1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, DeletionTimestamp: &ts},
		Spec:       v1.NamespaceSpec{Finalizers: []v1.FinalizerName{v1.FinalizerKubernetes}},
		Status:     v1.NamespaceStatus{Phase: v1.NamespaceActive},
	}
}

type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	content  *fakeContent
	c        *Controller
	reg      *prometheus.Registry
	recorder *record.FakeRecorder
	informer cache.SharedIndexInformer
}

func newFixture(t *testing.T, discover func() ([]*metav1.APIResourceList, error), objs ...runtime.Object) *fixture {
	t.Helper()
	client := fake.NewClientset(objs...)
	// The fake does not know the finalize subresource: apply it to the stored namespace.
	client.PrependReactor("create", "namespaces", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "finalize" {
			return false, nil, nil
		}
		ns := a.(clienttesting.CreateAction).GetObject().(*v1.Namespace)
		cur, err := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", ns.Name)
		if err != nil {
			return true, nil, err
		}
		if cur.(*v1.Namespace).UID != ns.UID {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "namespaces"}, ns.Name, errors.New("UID changed"))
		}
		next := cur.(*v1.Namespace).DeepCopy()
		next.Spec.Finalizers = ns.Spec.Finalizers
		return true, next, client.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, next, "")
	})
	factory := informers.NewSharedInformerFactory(client, time.Hour)
	content := newFakeContent(time.Now)
	opts := DefaultOptions()
	opts.GracePeriod = 0
	opts.PageSize = 50
	reg := prometheus.NewRegistry()
	recorder := record.NewFakeRecorder(100)
	c := New(factory.Core().V1().Namespaces(), client, content, discover, recorder, opts, reg)
	c.conflictBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 6}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.HasSynced) {
		t.Fatal("cache never synced")
	}
	return &fixture{t: t, client: client, content: content, c: c, reg: reg, recorder: recorder, informer: factory.Core().V1().Namespaces().Informer()}
}

func (f *fixture) sync(name string) error {
	f.t.Helper()
	return f.c.sync(context.Background(), name)
}

func (f *fixture) namespace(name string) *v1.Namespace {
	f.t.Helper()
	ns, err := f.client.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return ns
}

func (f *fixture) condition(name string, ct v1.NamespaceConditionType) v1.NamespaceCondition {
	f.t.Helper()
	ns := f.namespace(name)
	i := indexOf(ns.Status.Conditions, ct)
	if i < 0 {
		f.t.Fatalf("no %s condition on %s", ct, name)
	}
	return ns.Status.Conditions[i]
}

// writes returns the verbs+subresources of the namespace writes made so far.
func (f *fixture) writes() []string {
	var out []string
	for _, a := range fixtures.Writes(f.client.Actions()) {
		if a.GetResource().Resource != "namespaces" {
			continue
		}
		out = append(out, a.GetVerb()+"/"+a.GetSubresource())
	}
	return out
}

func requeueOf(t *testing.T, err error) time.Duration {
	t.Helper()
	var rq *worker.Requeue
	if !errors.As(err, &rq) {
		t.Fatalf("sync returned %v, want a requeue", err)
	}
	return rq.After
}

func TestSyncPodsFirstThenEverythingThenFinalize(t *testing.T) {
	f := newFixture(t, coreDiscovery, terminating("ns", "uid-1"))
	f.content.graceful[podsResource] = 30 * time.Second
	f.content.add(podsResource, "ns", 2)
	f.content.add(configMaps, "ns", 120)
	f.content.add(secrets, "ns", 3)

	after := requeueOf(t, f.sync("ns"))
	// Pods got 30 s to terminate; most stop well before: look again in a second.
	if after != time.Second {
		t.Fatalf("requeue after %s, want 1s", after)
	}
	if calls := f.content.callsOf("deletecollection configmaps"); len(calls) != 0 || len(f.content.callsOf("list configmaps")) != 0 {
		t.Fatal("ConfigMaps were looked at while Pods remain")
	}
	if f.namespace("ns").Status.Phase != v1.NamespaceTerminating {
		t.Fatal("phase not set to Terminating")
	}
	c := f.condition("ns", v1.NamespaceContentRemaining)
	if c.Status != v1.ConditionTrue || !strings.Contains(c.Message, "pods. has 2 resource instances (Pod/pods-00000, Pod/pods-00001)") {
		t.Fatalf("ContentRemaining = %+v", c)
	}

	// A resync while the Pods terminate: no write at all.
	before := len(f.writes())
	requeueOf(t, f.sync("ns"))
	if w := f.writes(); len(w) != before {
		t.Fatalf("a sync that learned nothing new wrote %v", w[before:])
	}

	// The kubelet is done: the Pods go, everything else follows, the namespace is finalized.
	f.content.graceful = map[schema.GroupVersionResource]time.Duration{}
	f.content.removeFinalizers(podsResource, "ns")
	if err := f.sync("ns"); err != nil {
		t.Fatal(err)
	}
	for _, gvr := range []schema.GroupVersionResource{podsResource, configMaps, secrets} {
		if n := f.content.count(gvr, "ns"); n != 0 {
			t.Fatalf("%d %s left", n, gvr.Resource)
		}
	}
	if fin := f.namespace("ns").Spec.Finalizers; len(fin) != 0 {
		t.Fatalf("finalizers %v after a complete sync", fin)
	}
	if w := f.writes(); w[len(w)-1] != "create/finalize" {
		t.Fatalf("last write %q, want the finalize subresource", w[len(w)-1])
	}
	if got := testutil.ToFloat64(f.c.metrics.deleted.WithLabelValues("configmaps.")); got != 120 {
		t.Errorf("objects_deleted_total{configmaps.} = %v, want 120", got)
	}
	if got := testutil.CollectAndCount(f.reg, "kcm_split_namespace_deletion_duration_seconds"); got != 1 {
		t.Errorf("deletion duration histogram has %d series, want 1", got)
	}
}

// TestSyncRechecksTerminatingPodsSoon: Pods with a long grace period are looked at again
// after 1 s, 2 s, 4 s... (never later than the estimate), so the rest of the content goes
// as soon as they are gone rather than when the estimate says.
func TestSyncRechecksTerminatingPodsSoon(t *testing.T) {
	f := newFixture(t, coreDiscovery, terminating("ns", "uid-1"))
	f.content.graceful[podsResource] = time.Hour
	f.content.add(podsResource, "ns", 1)
	f.content.add(configMaps, "ns", 3)
	var got []time.Duration
	for range 7 {
		got = append(got, requeueOf(t, f.sync("ns")))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("requeues %v, want %v", got, want)
	}
	if n := f.content.count(configMaps, "ns"); n != 3 {
		t.Fatalf("%d ConfigMaps left while a Pod terminates, want 3", n)
	}
	// The Pod is gone: the rest goes on the next sync, and the count starts over.
	f.content.removeFinalizers(podsResource, "ns")
	f.content.add(configMaps, "ns", 1, "example.com/hold")
	f.content.graceful = map[schema.GroupVersionResource]time.Duration{}
	if after := requeueOf(t, f.sync("ns")); after != recheckAfterWrite {
		t.Fatalf("requeue after %s once the status changed, want %s", after, recheckAfterWrite)
	}
	if n := f.content.count(configMaps, "ns"); n != 1 {
		t.Fatalf("%d ConfigMaps left, want only the held one", n)
	}
	if len(f.c.podChecks) != 0 {
		t.Fatalf("pod checks not reset: %v", f.c.podChecks)
	}
	// Nothing changed since: upstream's estimate for finalizers (15 s, looked at halfway).
	if after := requeueOf(t, f.sync("ns")); after != 8500*time.Millisecond {
		t.Fatalf("requeue after %s, want 8.5s", after)
	}
	if c := f.condition("ns", v1.NamespaceFinalizersRemaining); !strings.Contains(c.Message, "example.com/hold in 1 resource instances (ConfigMap/configmaps-00003)") {
		t.Fatalf("FinalizersRemaining = %q", c.Message)
	}
}

func TestSyncPartialDiscoveryFailureDeletesButDoesNotFinalize(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	discover := func() ([]*metav1.APIResourceList, error) {
		lists, _ := coreDiscovery()
		if broken.Load() {
			return lists, &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{
				{Group: "metrics.example.com", Version: "v1beta1"}: errors.New("the server is currently unable to handle the request"),
			}}
		}
		return lists, nil
	}
	f := newFixture(t, discover, terminating("ns", "uid-1"))
	f.content.add(configMaps, "ns", 10)
	err := f.sync("ns")
	if err == nil || !strings.Contains(err.Error(), "metrics.example.com/v1beta1") {
		t.Fatalf("sync = %v, want an error naming the failing group version", err)
	}
	if n := f.content.count(configMaps, "ns"); n != 0 {
		t.Fatalf("%d ConfigMaps left: what can be deleted must be", n)
	}
	c := f.condition("ns", v1.NamespaceDeletionDiscoveryFailure)
	if c.Status != v1.ConditionTrue || c.Reason != "DiscoveryFailed" || !strings.Contains(c.Message, "metrics.example.com/v1beta1") {
		t.Fatalf("DiscoveryFailure = %+v", c)
	}
	if fin := f.namespace("ns").Spec.Finalizers; !slices.Contains(fin, v1.FinalizerKubernetes) {
		t.Fatal("finalized although discovery failed")
	}
	select {
	case e := <-f.recorder.Events:
		if !strings.HasPrefix(e, "Warning DiscoveryFailed") || !strings.Contains(e, "metrics.example.com/v1beta1") {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatal("no Event naming the failing API")
	}

	// The API is removed: the next sync finalizes (the cache is refreshed on APIService
	// changes; here the failed discovery is simply too old to reuse).
	broken.Store(false)
	f.c.resources.invalidate()
	if err := f.sync("ns"); err != nil {
		t.Fatal(err)
	}
	if c := f.condition("ns", v1.NamespaceDeletionDiscoveryFailure); c.Status != v1.ConditionFalse {
		t.Fatalf("DiscoveryFailure still %s", c.Status)
	}
	if fin := f.namespace("ns").Spec.Finalizers; len(fin) != 0 {
		t.Fatalf("not finalized once discovery works: %v", fin)
	}
}

func TestSyncLeavesAReplacedNamespaceAlone(t *testing.T) {
	f := newFixture(t, coreDiscovery, terminating("ns", "uid-old"))
	f.content.add(configMaps, "ns", 3)
	// The finalize conflicts because someone else finalized the namespace and created a new
	// one with the same name: every later read shows the new UID.
	var replaced atomic.Bool
	f.client.PrependReactor("get", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
		if !replaced.Load() {
			return false, nil, nil
		}
		fresh := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", UID: "uid-new"}, Spec: v1.NamespaceSpec{Finalizers: []v1.FinalizerName{v1.FinalizerKubernetes}}}
		return true, fresh, nil
	})
	f.client.PrependReactor("create", "namespaces", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "finalize" {
			replaced.Store(true)
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "namespaces"}, "ns", errors.New("resourceVersion changed"))
		}
		return false, nil, nil
	})
	if err := f.sync("ns"); err != nil {
		t.Fatalf("sync = %v, want nil: the namespace it worked on is gone", err)
	}
	finalizes := 0
	for _, w := range f.writes() {
		if w == "create/finalize" {
			finalizes++
		}
	}
	if finalizes != 1 {
		t.Fatalf("%d finalize calls, want 1 (the one that conflicted, not retried on the new namespace)", finalizes)
	}
	if v := testutil.ToFloat64(f.c.metrics.stopped.WithLabelValues(StopReplaced)); v != 1 {
		t.Errorf("deletion_stopped_total{replaced} = %v, want 1", v)
	}
}

// replaceAfter makes the API answer namespace GETs with want once n GETs went through
// (n = 1: only the sync's first read sees the namespace being deleted). want nil: NotFound.
func (f *fixture) replaceAfter(n int32, want *v1.Namespace, err error) {
	var gets atomic.Int32
	f.client.PrependReactor("get", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
		if gets.Add(1) <= n {
			return false, nil, nil
		}
		if err != nil {
			return true, nil, err
		}
		if want == nil {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns")
		}
		return true, want, nil
	})
}

func TestSyncChecksTheLiveNamespaceBeforeEveryPageOfDeletes(t *testing.T) {
	live := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", UID: "uid-new"}}
	for _, tc := range []struct {
		name string
		// okGets is how many namespace reads see the old namespace: the sync's first read,
		// then one per page of deletes.
		okGets int32
		now    *v1.Namespace
		getErr error
		// left is how many of the 120 ConfigMaps must remain (pages of 50).
		left   int
		reason string
	}{
		{name: "recreated before the first page", okGets: 1, now: live, left: 120, reason: StopReplaced},
		{name: "gone before the first page", okGets: 1, left: 120, reason: StopGone},
		{name: "recreated after one page", okGets: 2, now: live, left: 70, reason: StopReplaced},
		{name: "the check fails: unknown is not ours", okGets: 1, getErr: apierrors.NewServiceUnavailable("etcd is down"), left: 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := terminating("ns", "uid-old")
			old.Status.Phase = v1.NamespaceTerminating
			f := newFixture(t, coreDiscovery, old)
			f.content.add(configMaps, "ns", 120)
			// The informer still shows the old namespace: only the live read can tell.
			f.replaceAfter(tc.okGets, tc.now, tc.getErr)
			err := f.sync("ns")
			if tc.getErr != nil {
				if err == nil || !strings.Contains(err.Error(), "checking the namespace") {
					t.Fatalf("sync = %v, want the failed check returned for a retry", err)
				}
			} else if err != nil {
				t.Fatalf("sync = %v, want nil: the namespace it worked on is gone", err)
			}
			// The one page allowed before the replacement may go to another resource of the
			// sync (their order is not fixed): at most tc.left fewer, never more deleted.
			if n := f.content.count(configMaps, "ns"); n < tc.left || (tc.okGets == 1 && n != tc.left) {
				t.Fatalf("%d ConfigMaps left, want %d (at least)", n, tc.left)
			}
			for _, w := range f.writes() {
				if w == "create/finalize" {
					t.Fatal("finalized")
				}
			}
			if tc.reason != "" {
				if v := testutil.ToFloat64(f.c.metrics.stopped.WithLabelValues(tc.reason)); v != 1 {
					t.Errorf("deletion_stopped_total{%s} = %v, want 1", tc.reason, v)
				}
				if evs := fixtures.Events(f.recorder); len(evs) != 0 {
					t.Errorf("Events %v: nothing is written about the new namespace", evs)
				}
			}
		})
	}
}

func TestSyncBoundsConflictRetriesWithOneEventPerEpisode(t *testing.T) {
	f := newFixture(t, coreDiscovery, terminating("ns", "uid-1"))
	f.c.conflictBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 4}
	var conflicting atomic.Bool
	conflicting.Store(true)
	f.client.PrependReactor("update", "namespaces", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicting.Load() {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "namespaces"}, "ns", errors.New("resourceVersion changed"))
		}
		return false, nil, nil
	})
	statusWrites := func() int {
		n := 0
		for _, w := range f.writes() {
			if w == "update/status" {
				n++
			}
		}
		return n
	}
	conflictEvents := func() int {
		n := 0
		for _, e := range fixtures.Events(f.recorder) {
			if strings.Contains(e, "Warning "+EventUpdateConflict) {
				n++
			}
		}
		return n
	}
	for i := range 3 {
		err := f.sync("ns")
		if !apierrors.IsConflict(err) {
			t.Fatalf("sync %d: sync = %v, want the conflict returned to the queue", i, err)
		}
		if got := statusWrites(); got != 4*(i+1) {
			t.Fatalf("sync %d: %d status writes in all, want 4 per sync", i, got)
		}
		want := 0
		if i == 0 {
			want = 1
		}
		if got := conflictEvents(); got != want {
			t.Fatalf("sync %d: %d UpdateConflict Events, want %d (one per episode)", i, got, want)
		}
	}
	// A write goes through: the episode ends, the namespace is finalized.
	conflicting.Store(false)
	if err := f.sync("ns"); err != nil {
		t.Fatal(err)
	}
	if fin := f.namespace("ns").Spec.Finalizers; len(fin) != 0 {
		t.Fatalf("finalizers %v", fin)
	}
	if got := conflictEvents(); got != 0 {
		t.Fatalf("%d more UpdateConflict Events", got)
	}
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if len(f.c.conflicting) != 0 {
		t.Fatalf("episode not ended: %v", f.c.conflicting)
	}
}

func TestSyncNeverFinalizesWhatWasNotVerifiedDeleted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		discover func() ([]*metav1.APIResourceList, error)
		setup    func(*fakeContent)
		cond     v1.NamespaceConditionType
	}{
		{
			name: "discovery fails entirely",
			discover: func() ([]*metav1.APIResourceList, error) {
				return nil, errors.New("the server is currently unable to handle the request")
			},
			cond: v1.NamespaceDeletionDiscoveryFailure,
		},
		{
			name:     "listing a resource fails",
			discover: coreDiscovery,
			setup:    func(c *fakeContent) { c.failing[secrets] = true },
			cond:     v1.NamespaceDeletionContentFailure,
		},
		{
			name:     "the list that counts what is left fails",
			discover: coreDiscovery,
			setup:    func(c *fakeContent) { c.failListAfter = map[schema.GroupVersionResource]int{configMaps: 1} },
			cond:     v1.NamespaceDeletionContentFailure,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.discover, terminating("ns", "uid-1"))
			f.content.add(configMaps, "ns", 10, "example.com/hold")
			f.content.add(secrets, "ns", 10)
			if tc.setup != nil {
				tc.setup(f.content)
			}
			err := f.sync("ns")
			var rq *worker.Requeue
			if err == nil || errors.As(err, &rq) {
				t.Fatalf("sync = %v, want an error (retried with backoff)", err)
			}
			if fin := f.namespace("ns").Spec.Finalizers; !slices.Contains(fin, v1.FinalizerKubernetes) {
				t.Fatal("finalized although the content was not verified deleted")
			}
			if c := f.condition("ns", tc.cond); c.Status != v1.ConditionTrue {
				t.Fatalf("%s = %+v", tc.cond, c)
			}
		})
	}
}

func TestSyncWaitsForTheGracePeriod(t *testing.T) {
	f := newFixture(t, coreDiscovery, terminating("ns", "uid-1"))
	f.c.opts.GracePeriod = time.Hour
	f.content.add(configMaps, "ns", 3)
	after := requeueOf(t, f.sync("ns"))
	if after <= 59*time.Minute || after > time.Hour {
		t.Fatalf("requeue after %s, want just under the 1h grace", after)
	}
	if len(f.content.calls) != 0 || len(f.writes()) != 0 {
		t.Fatalf("acted within the grace period: %v %v", f.content.calls, f.writes())
	}
}

func TestSyncIgnoresLiveAndFinalizedNamespaces(t *testing.T) {
	live := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "live", UID: "u1"}, Spec: v1.NamespaceSpec{Finalizers: []v1.FinalizerName{v1.FinalizerKubernetes}}}
	done := terminating("done", "u2")
	done.Spec.Finalizers = []v1.FinalizerName{"example.com/other"}
	f := newFixture(t, coreDiscovery, live, done)
	f.content.add(configMaps, "live", 3)
	for _, name := range []string{"live", "done", "missing"} {
		if err := f.sync(name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if f.content.count(configMaps, "live") != 3 || len(f.content.calls) != 0 {
		t.Fatalf("content of a live or finalized namespace touched: %v", f.content.calls)
	}
}

func TestMetricsAreNamedAndLintClean(t *testing.T) {
	f := newFixture(t, coreDiscovery, terminating("a", "u1"), &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "live", UID: "u2"}})
	f.c.metrics.deleted.WithLabelValues("configmaps.").Add(3)
	f.c.metrics.duration.Observe(2)
	for name, want := range map[string]int{
		"kcm_split_namespace_terminating":                1,
		"kcm_split_namespace_oldest_terminating_seconds": 1,
		"kcm_split_namespace_objects_deleted_total":      1,
		"kcm_split_namespace_deletion_duration_seconds":  1,
		"kcm_split_namespace_deletion_stopped_total":     2, // gone, replaced: present from the start
		"workqueue_depth": 1,
	} {
		if got := testutil.CollectAndCount(f.reg, name); got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
	// One of the two namespaces is terminating.
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(`
# HELP kcm_split_namespace_terminating Namespaces that have a deletion timestamp and still exist, as this controller's cache sees them.
# TYPE kcm_split_namespace_terminating gauge
kcm_split_namespace_terminating 1
`), "kcm_split_namespace_terminating"); err != nil {
		t.Error(err)
	}
	// terminating() set the deletion timestamp a minute ago.
	fams, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() == "kcm_split_namespace_oldest_terminating_seconds" {
			if age := fam.GetMetric()[0].GetGauge().GetValue(); age < 60 || age > 600 {
				t.Errorf("kcm_split_namespace_oldest_terminating_seconds = %v, want about 60", age)
			}
		}
	}
	metricstest.Lint(t, f.reg)
}

// The reconcile metrics carry upstream's name of the controller, the value --controllers takes.
func TestReconcileMetricsCarryUpstreamName(t *testing.T) {
	f := newFixture(t, coreDiscovery)
	if got := metricstest.LabelValues(t, f.reg, "kcm_split_reconcile_total", "controller"); got != Name {
		t.Fatalf("controller label %q, want %q", got, Name)
	}
}
