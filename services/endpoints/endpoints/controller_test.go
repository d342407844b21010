package endpoints

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
)

var creationTime = testobj.Created.UTC().Format(time.RFC3339Nano)

// Over 80 lines: one table of cases, each a few lines; splitting it would scatter the cases.
func TestSyncServiceCreates(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want *v1.Endpoints
	}{
		{
			name: "ready and not-ready pods, service labels copied",
			objs: []runtime.Object{
				testobj.Service("s", func(s *v1.Service) { s.Labels = map[string]string{"team": "a"} }),
				testobj.Pod("a", "10.1.0.1", true),
				testobj.Pod("b", "10.1.0.2", false),
				testobj.Pod("other", "10.1.0.3", true, func(p *v1.Pod) { p.Labels = map[string]string{"app": "db"} }),
				testobj.Pod("elsewhere", "10.1.0.4", true, func(p *v1.Pod) { p.Namespace = "other" }),
			},
			want: &v1.Endpoints{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: testobj.NS, Name: "s",
					Labels:      map[string]string{"team": "a", LabelManagedBy: ComponentName},
					Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: creationTime},
				},
				Subsets: []v1.EndpointSubset{{
					Addresses:         []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")},
					NotReadyAddresses: []v1.EndpointAddress{testobj.Address("b", "10.1.0.2")},
					Ports:             []v1.EndpointPort{testobj.Port("http", 8080)},
				}},
			},
		},
		{
			name: "no pods: empty Endpoints",
			objs: []runtime.Object{testobj.Service("s")},
			want: &v1.Endpoints{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: testobj.NS, Name: "s",
					Labels:      map[string]string{LabelManagedBy: ComponentName},
					Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: creationTime},
				},
			},
		},
		{
			name: "headless without ports",
			objs: []runtime.Object{
				testobj.Service("s", func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone; s.Spec.Ports = nil }),
				testobj.Pod("a", "10.1.0.1", true, func(p *v1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "a", "s" }),
			},
			want: &v1.Endpoints{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: testobj.NS, Name: "s",
					Labels:      map[string]string{v1.IsHeadlessService: "", LabelManagedBy: ComponentName},
					Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: creationTime},
				},
				Subsets: []v1.EndpointSubset{{
					Addresses: []v1.EndpointAddress{func() v1.EndpointAddress { a := testobj.Address("a", "10.1.0.1"); a.Hostname = "a"; return a }()},
				}},
			},
		},
		{
			// Upstream writes nodeName: "" here, which the API server rejects.
			name: "pod with an IP but no node",
			objs: []runtime.Object{
				testobj.Service("s"),
				testobj.Pod("a", "10.1.0.1", false, func(p *v1.Pod) { p.Spec.NodeName = "" }),
			},
			want: &v1.Endpoints{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: testobj.NS, Name: "s",
					Labels:      map[string]string{LabelManagedBy: ComponentName},
					Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: creationTime},
				},
				Subsets: []v1.EndpointSubset{{
					NotReadyAddresses: []v1.EndpointAddress{func() v1.EndpointAddress { a := testobj.Address("a", "10.1.0.1"); a.NodeName = nil; return a }()},
					Ports:             []v1.EndpointPort{testobj.Port("http", 8080)},
				}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, DefaultOptions(), tc.objs...)
			if err := f.sync("ns/s"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"create ns/s"}, f.writes()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, f.stored("s")); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}

			// The informer delivers what was written; syncing again must not write.
			f.catchUp()
			if err := f.sync("ns/s"); err != nil {
				t.Fatal(err)
			}
			if w := f.writes(); len(w) != 0 {
				t.Errorf("second sync wrote %v", w)
			}
		})
	}
}

func TestSyncServiceLeavesAlone(t *testing.T) {
	userEndpoints := &v1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "s", ResourceVersion: "3"},
		Subsets:    []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{{IP: "192.0.2.1"}}, Ports: []v1.EndpointPort{{Port: 443}}}},
	}
	for _, tc := range []struct {
		name string
		svc  *v1.Service
	}{
		{name: "selectorless service", svc: testobj.Service("s", func(s *v1.Service) { s.Spec.Selector = nil })},
		{name: "ExternalName service", svc: testobj.Service("s", func(s *v1.Service) {
			s.Spec.Type, s.Spec.ExternalName, s.Spec.ClusterIP = v1.ServiceTypeExternalName, "example.com", ""
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, DefaultOptions(), tc.svc, userEndpoints.DeepCopy(), testobj.Pod("a", "10.1.0.1", true))
			if err := f.sync("ns/s"); err != nil {
				t.Fatal(err)
			}
			if w := f.writes(); len(w) != 0 {
				t.Errorf("writes = %v, want none", w)
			}
		})
	}
}

func TestSyncServiceUpToDate(t *testing.T) {
	svc := testobj.Service("s")
	current := func(subsets ...v1.EndpointSubset) *v1.Endpoints {
		return &v1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: testobj.NS, Name: "s", ResourceVersion: "10",
				Labels: map[string]string{LabelManagedBy: ComponentName},
			},
			Subsets: subsets,
		}
	}
	withRV := func(a v1.EndpointAddress, rv string) v1.EndpointAddress { a.TargetRef.ResourceVersion = rv; return a }
	for _, tc := range []struct {
		name string
		objs []runtime.Object
	}{
		{
			name: "pod resourceVersion recorded by an older writer",
			objs: []runtime.Object{svc, testobj.Pod("a", "10.1.0.1", true, func(p *v1.Pod) { p.ResourceVersion = "99" }),
				current(v1.EndpointSubset{Addresses: []v1.EndpointAddress{withRV(testobj.Address("a", "10.1.0.1"), "12")}, Ports: []v1.EndpointPort{testobj.Port("http", 8080)}})},
		},
		{
			name: "same content in another layout",
			objs: []runtime.Object{svc, testobj.Pod("a", "10.1.0.1", true), testobj.Pod("b", "10.1.0.2", true),
				current(
					v1.EndpointSubset{Addresses: []v1.EndpointAddress{testobj.Address("b", "10.1.0.2")}, Ports: []v1.EndpointPort{testobj.Port("http", 8080)}},
					v1.EndpointSubset{Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")}, Ports: []v1.EndpointPort{testobj.Port("http", 8080)}},
				)},
		},
		{
			name: "no trigger-time annotation",
			objs: []runtime.Object{svc, current()},
		},
		{
			name: "headless marker missing on a headless service",
			objs: []runtime.Object{testobj.Service("s", func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone }), current()},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, DefaultOptions(), tc.objs...)
			if err := f.sync("ns/s"); err != nil {
				t.Fatal(err)
			}
			if w := f.writes(); len(w) != 0 {
				t.Errorf("writes = %v, want none", w)
			}
		})
	}
}

func TestSyncServiceUpdates(t *testing.T) {
	svc := testobj.Service("s", func(s *v1.Service) { s.Labels = map[string]string{"team": "a"} })
	current := &v1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testobj.NS, Name: "s", ResourceVersion: "10", UID: "ep-uid",
			Labels:      map[string]string{"team": "a", "stray": "x", LabelManagedBy: ComponentName},
			Annotations: map[string]string{"note": "kept", v1.EndpointsLastChangeTriggerTime: "2000-01-01T00:00:00Z"},
		},
		Subsets: []v1.EndpointSubset{{NotReadyAddresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")}, Ports: []v1.EndpointPort{testobj.Port("http", 8080)}}},
	}
	f := newFixture(t, DefaultOptions(), svc, current, testobj.Pod("a", "10.1.0.1", false))
	// A first sync records the current trigger times, as a running controller would have.
	if err := f.sync("ns/s"); err != nil {
		t.Fatal(err)
	}
	f.catchUp()

	becameReady := metav1.NewTime(testobj.Created.Add(time.Hour))
	f.cache(testobj.Pod("a", "10.1.0.1", true, func(p *v1.Pod) {
		p.ResourceVersion = "2"
		p.Status.Conditions[0].LastTransitionTime = becameReady
	}))
	if err := f.sync("ns/s"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"update ns/s"}, f.writes()); diff != "" {
		t.Fatalf("writes (-want +got):\n%s", diff)
	}
	want := &v1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testobj.NS, Name: "s", ResourceVersion: "10", UID: "ep-uid",
			Labels: map[string]string{"team": "a", LabelManagedBy: ComponentName},
			Annotations: map[string]string{
				"note":                            "kept",
				v1.EndpointsLastChangeTriggerTime: becameReady.UTC().Format(time.RFC3339Nano),
			},
		},
		Subsets: []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")}, Ports: []v1.EndpointPort{testobj.Port("http", 8080)}}},
	}
	if diff := cmp.Diff(want, f.stored("s")); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}

	// A write without a new trigger (here a Service label change) clears the annotation.
	f.catchUp()
	f.cache(testobj.Service("s", func(s *v1.Service) { s.Labels = map[string]string{"team": "b"} }))
	if err := f.sync("ns/s"); err != nil {
		t.Fatal(err)
	}
	got := f.stored("s")
	if _, ok := got.Annotations[v1.EndpointsLastChangeTriggerTime]; ok || got.Labels["team"] != "b" {
		t.Errorf("after a service label change: labels %v, annotations %v; want team=b and no trigger time", got.Labels, got.Annotations)
	}
}

func TestSyncServiceOverCapacity(t *testing.T) {
	var pods []runtime.Object
	for i := range maxAddresses + 5 {
		pods = append(pods, testobj.Pod(fmt.Sprintf("p%04d", i), fmt.Sprintf("10.1.%d.%d", i/256, i%256), i < maxAddresses-2))
	}
	f := newFixture(t, DefaultOptions(), append(pods, testobj.Service("s"))...)
	if err := f.sync("ns/s"); err != nil {
		t.Fatal(err)
	}
	got := f.stored("s")
	if got.Annotations[v1.EndpointsOverCapacity] != overCapacityTruncated {
		t.Errorf("annotations = %v, want over-capacity: truncated", got.Annotations)
	}
	if r, n := len(got.Subsets[0].Addresses), len(got.Subsets[0].NotReadyAddresses); r != maxAddresses-2 || n != 2 {
		t.Errorf("kept %d ready and %d not ready, want %d and 2", r, n, maxAddresses-2)
	}

	// Still over capacity, nothing changed: no write (upstream rewrites on every sync).
	f.catchUp()
	if err := f.sync("ns/s"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("resync of a truncated Endpoints wrote %v", w)
	}

	// Back under: the annotation goes.
	for _, p := range pods[maxAddresses-10:] {
		f.uncache(p)
	}
	if err := f.sync("ns/s"); err != nil {
		t.Fatal(err)
	}
	got = f.stored("s")
	if _, ok := got.Annotations[v1.EndpointsOverCapacity]; ok {
		t.Errorf("annotations = %v, want no over-capacity", got.Annotations)
	}
	if n := addressCount(got.Subsets); n != maxAddresses-10 {
		t.Errorf("%d addresses, want %d", n, maxAddresses-10)
	}
}

func TestSyncServiceDeleted(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs []runtime.Object
	}{
		{name: "endpoints exist", objs: []runtime.Object{&v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "s"}}}},
		{name: "endpoints already gone", objs: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, DefaultOptions(), tc.objs...)
			if err := f.sync("ns/s"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"delete ns/s"}, f.writes()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if f.stored("s") != nil {
				t.Error("endpoints still exist")
			}
		})
	}
	t.Run("delete fails", func(t *testing.T) {
		f := newFixture(t, DefaultOptions())
		f.client.PrependReactor("delete", "endpoints", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("etcd down")
		})
		if err := f.sync("ns/s"); err == nil {
			t.Error("no error to retry")
		}
	})
}

func TestSyncServiceWriteFailures(t *testing.T) {
	gr := schema.GroupResource{Resource: "endpoints"}
	terminating := apierrors.NewForbidden(gr, "s", fmt.Errorf("namespace %s is being terminated", testobj.NS))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: v1.NamespaceTerminatingCause}}
	existing := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "s", ResourceVersion: "4"}}

	for _, tc := range []struct {
		name       string
		current    *v1.Endpoints
		verb       string
		err        error
		wantErr    bool
		wantEvents []string
	}{
		{name: "create into a terminating namespace is dropped quietly", verb: "create", err: terminating},
		{
			name: "create forbidden otherwise", verb: "create", err: apierrors.NewForbidden(gr, "s", fmt.Errorf("policy")),
			wantErr: true, wantEvents: []string{"Warning FailedToCreateEndpoint Failed to create endpoint for service ns/s"},
		},
		{
			name: "create fails", verb: "create", err: apierrors.NewInternalError(fmt.Errorf("boom")),
			wantErr: true, wantEvents: []string{"Warning FailedToCreateEndpoint Failed to create endpoint for service ns/s"},
		},
		{
			name: "create finds it exists: an Event, as upstream", verb: "create", err: apierrors.NewAlreadyExists(gr, "s"),
			wantErr: true, wantEvents: []string{"Warning FailedToCreateEndpoint Failed to create endpoint for service ns/s"},
		},
		{
			name: "update fails", current: existing, verb: "update", err: apierrors.NewInvalid(schema.GroupKind{Kind: "Endpoints"}, "s", nil),
			wantErr: true, wantEvents: []string{"Warning FailedToUpdateEndpoint Failed to update endpoint ns/s"},
		},
		{
			name: "update conflicts", current: existing, verb: "update", err: apierrors.NewConflict(gr, "s", fmt.Errorf("changed")),
			wantErr: true, wantEvents: []string{"Warning FailedToUpdateEndpoint Failed to update endpoint ns/s"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{testobj.Service("s"), testobj.Pod("a", "10.1.0.1", true)}
			if tc.current != nil {
				objs = append(objs, tc.current.DeepCopy())
			}
			f := newFixture(t, DefaultOptions(), objs...)
			f.client.PrependReactor(tc.verb, "endpoints", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			err := f.sync("ns/s")
			if (err != nil) != tc.wantErr {
				t.Errorf("err = %v, want error: %v", err, tc.wantErr)
			}
			var got []string
			for _, e := range f.events() {
				// The message ends with the API error; match its stable start.
				for _, w := range tc.wantEvents {
					if strings.HasPrefix(e, w) {
						e = w
					}
				}
				got = append(got, e)
			}
			if diff := cmp.Diff(tc.wantEvents, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// A write that fails must not lose its trigger: the retry writes the same trigger time.
func TestSyncServiceRetryKeepsTriggerTime(t *testing.T) {
	current := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "s", ResourceVersion: "4"}}
	f := newFixture(t, DefaultOptions(), testobj.Service("s"), current, testobj.Pod("a", "10.1.0.1", true))
	failed := false
	f.client.PrependReactor("update", "endpoints", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failed {
			return false, nil, nil
		}
		failed = true
		return true, nil, apierrors.NewInternalError(fmt.Errorf("boom"))
	})
	if err := f.sync("ns/s"); err == nil {
		t.Fatal("first sync succeeded, want the injected failure")
	}
	if err := f.sync("ns/s"); err != nil {
		t.Fatal(err)
	}
	if got := f.stored("s").Annotations[v1.EndpointsLastChangeTriggerTime]; got != creationTime {
		t.Errorf("trigger time after the retry = %q, want the first sync's %q", got, creationTime)
	}
}

// After an update the informer still holds the replaced version for a while; a sync then
// must neither compute from it nor write.
func TestSyncServiceStaleCache(t *testing.T) {
	svc := testobj.Service("s")
	current := &v1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "s", ResourceVersion: "5", Labels: map[string]string{LabelManagedBy: ComponentName}},
	}
	f := newFixture(t, DefaultOptions(), svc, current, testobj.Pod("a", "10.1.0.1", true))
	// The fake API server does not bump resourceVersions; do it as the real one does.
	f.client.PrependReactor("update", "endpoints", func(a clienttesting.Action) (bool, runtime.Object, error) {
		ep := a.(clienttesting.UpdateAction).GetObject().(*v1.Endpoints).DeepCopy()
		ep.ResourceVersion = "6"
		return true, ep, f.client.Tracker().Update(a.GetResource(), ep, ep.Namespace)
	})

	if err := f.sync("ns/s"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"update ns/s"}, f.writes()); diff != "" {
		t.Fatalf("writes (-want +got):\n%s", diff)
	}

	// The pod goes away again: computed from the stale cache (no addresses), this would look
	// up to date and leave the address we just wrote in place.
	f.uncache(testobj.Pod("a", "", false))
	err := f.sync("ns/s")
	if err == nil {
		t.Fatal("sync from a stale cache succeeded")
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("sync from a stale cache wrote %v", w)
	}

	f.catchUp()
	if err := f.sync("ns/s"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"update ns/s"}, f.writes()); diff != "" {
		t.Errorf("after the cache caught up, writes (-want +got):\n%s", diff)
	}
	if got := f.stored("s"); len(got.Subsets) != 0 {
		t.Errorf("subsets = %v, want none", got.Subsets)
	}
}

func TestSyncServiceMalformedKey(t *testing.T) {
	f := newFixture(t, DefaultOptions())
	if err := f.sync("a/b/c"); err != nil {
		t.Errorf("malformed key returned %v; retrying cannot help", err)
	}
}

// Run against informers over a fake clientset: orphans are swept at start, leader-election
// locks are not, and Services get their Endpoints.
func TestRun(t *testing.T) {
	lock := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{
		Namespace: testobj.NS, Name: "lock",
		Annotations: map[string]string{resourcelock.LeaderElectionRecordAnnotationKey: "{}"},
	}}
	orphan := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: testobj.NS, Name: "orphan"}}
	client := fake.NewClientset(testobj.Service("s"), testobj.Pod("a", "10.1.0.1", true), lock, orphan)
	factory := informers.NewSharedInformerFactory(client, 0)
	c := New(factory.Core().V1().Pods(), factory.Core().V1().Services(), factory.Core().V1().Endpoints(),
		client, record.NewFakeRecorder(10), DefaultOptions(), nil)
	if c.HasSynced() {
		t.Fatal("synced before the informers started")
	}

	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
		factory.Shutdown()
	}()

	get := func(name string) (*v1.Endpoints, error) {
		return client.CoreV1().Endpoints(testobj.NS).Get(ctx, name, metav1.GetOptions{})
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, errOrphan := get("orphan")
		ep, errSvc := get("s")
		return apierrors.IsNotFound(errOrphan) && errSvc == nil && len(ep.Subsets) == 1, nil
	})
	if err != nil {
		t.Fatalf("orphan not deleted or service endpoints not created: %v", err)
	}
	if _, err := get("lock"); err != nil {
		t.Errorf("leader-election lock: %v", err)
	}
	if !c.HasSynced() {
		t.Error("not synced while running")
	}
}

func TestRunReturnsWhenStoppedBeforeSync(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	c := New(factory.Core().V1().Pods(), factory.Core().V1().Services(), factory.Core().V1().Endpoints(),
		client, record.NewFakeRecorder(10), DefaultOptions(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // informers never started
	if err := c.Run(ctx, 1); err != nil {
		t.Errorf("Run = %v, want nil on shutdown", err)
	}
}

func TestQueueMetricsUseUpstreamName(t *testing.T) {
	f := newFixture(t, DefaultOptions())
	f.c.queue.Add("ns/s")
	n, err := testutil.GatherAndCount(f.registry, "workqueue_adds_total")
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no workqueue_adds_total series")
	}
	const want = `
# HELP workqueue_adds_total Total number of adds handled by workqueue
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="endpoint"} 1
`
	if err := testutil.GatherAndCompare(f.registry, strings.NewReader(want), "workqueue_adds_total"); err != nil {
		t.Error(err)
	}
}
