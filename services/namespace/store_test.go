package namespace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
)

const storeNS, storeName = "kube-system", "namespace-controller" + DiscoveryStoreSuffix

// testClock is a settable clock shared by a controller and its resource cache.
type testClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.at }
func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.at = c.at.Add(d)
	c.mu.Unlock()
}

// storeFixture is a controller with the flag at allowed, its clock, discovery and store.
func storeFixture(t *testing.T, clock *testClock, d *switchableDiscovery, objs ...runtime.Object) *fixture {
	t.Helper()
	f := newFixture(t, d.discover, objs...)
	f.c.opts.AllowDeletionWithUnavailableGroups = 10 * time.Minute
	f.c.now, f.c.resources.now = clock.now, clock.now
	f.c.keepDiscoveryIn(f.client.CoreV1().ConfigMaps(storeNS), storeName)
	return f
}

func (f *fixture) discoverNow() {
	f.c.resources.invalidate()
	f.c.resources.get(f.c.now())
}

func (f *fixture) storedConfigMap() *v1.ConfigMap {
	f.t.Helper()
	cm, err := f.client.CoreV1().ConfigMaps(storeNS).Get(context.Background(), storeName, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return cm
}

func (f *fixture) configMapWrites() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource == "configmaps" && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			out = append(out, a.GetVerb())
		}
	}
	return out
}

func (f *fixture) lastDiscovery(gv schema.GroupVersion) unavailableGV {
	return f.c.memory.unavailable([]schema.GroupVersion{gv})[0]
}

// TestHandoverKeepsWhatTheFormerHolderSaw: a holder that saw a group answer (serving nothing
// that can be in a namespace) and then fail keeps that in the ConfigMap; the next holder,
// which never saw it answer, starts from it and finalizes the namespace when the flag allows,
// counting from when the former holder saw it fail, exactly as the former holder would have.
func TestHandoverKeepsWhatTheFormerHolderSaw(t *testing.T) {
	clock := &testClock{at: time.Now()}
	d := &switchableDiscovery{}
	a := storeFixture(t, clock, d)
	ctx := context.Background()
	if !a.c.loadStore(ctx) {
		t.Fatal("an absent store is loaded (nothing to take over)")
	}
	a.discoverNow()
	d.set(true)
	clock.advance(time.Minute)
	a.discoverNow()
	failedAt := clock.now()
	if !a.c.saveStore(ctx) {
		t.Fatal("saveStore failed")
	}
	cm := a.storedConfigMap()
	var kept storedMemory
	if err := json.Unmarshal([]byte(cm.Data[DiscoveryStoreKey]), &kept); err != nil {
		t.Fatal(err)
	}
	e := kept.GroupVersions[harmlessGV.String()]
	if !slices.Equal(e.Others, []string{"gadgetreviews", "gadgets"}) || len(e.Holders) != 0 || e.FailingSince == nil || !e.FailingSince.Equal(failedAt) {
		t.Fatalf("kept %+v, want others gadgetreviews,gadgets, no holders, failing since %s", e, failedAt)
	}
	if e := kept.GroupVersions["v1"]; !slices.Equal(e.Holders, []string{"configmaps", "pods", "secrets"}) || !slices.Equal(e.Others, []string{"bindings"}) {
		t.Fatalf("kept v1 as %+v", e)
	}

	// The next holder: the group fails for it from the start.
	clock.advance(time.Minute)
	b := storeFixture(t, clock, d, terminating("ns", "uid-1"), cm)
	b.content.add(configMaps, "ns", 2)
	b.discoverNow()
	if got := b.lastDiscovery(harmlessGV).last; got != LastDiscoveryNone {
		t.Fatalf("before reading the store: %s, want %s", got, LastDiscoveryNone)
	}
	if !b.c.loadStore(ctx) {
		t.Fatal("store not loaded")
	}
	u := b.lastDiscovery(harmlessGV)
	if u.last != LastDiscoveryHoldsNothing || !u.since.Equal(failedAt) {
		t.Fatalf("after reading the store: %+v, want holds nothing since %s", u, failedAt)
	}
	// Waiting is counted from the former holder's first failure, not from b's start.
	b.c.resources.invalidate()
	if after := requeueOf(t, b.sync("ns")); after != 10*time.Minute-time.Minute {
		t.Fatalf("requeue after %s, want 9m (failing for 1m of the allowed 10m)", after)
	}
	clock.advance(9 * time.Minute)
	b.c.resources.invalidate()
	if err := b.sync("ns"); err != nil || slices.Contains(b.namespace("ns").Spec.Finalizers, v1.FinalizerKubernetes) {
		t.Fatalf("sync = %v, finalizers %v: want finalized after the handover", err, b.namespace("ns").Spec.Finalizers)
	}
}

// TestStoreNeverGrantsWhatItCannotVouchFor: a store that is absent, unreadable, does not
// parse, is stale or comes from a clock far ahead leaves the group unknown: it blocks.
func TestStoreNeverGrantsWhatItCannotVouchFor(t *testing.T) {
	now := time.Now()
	valid := func(observed time.Time) *v1.ConfigMap {
		served, failing := observed.Add(-2*time.Minute), observed.Add(-time.Minute)
		b, _ := json.Marshal(storedMemory{Observed: observed, GroupVersions: map[string]storedGV{
			harmlessGV.String(): {Served: served, Others: []string{"gadgets"}, FailingSince: &failing},
		}})
		return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: storeNS, Name: storeName}, Data: map[string]string{DiscoveryStoreKey: string(b)}}
	}
	for _, tc := range []struct {
		name       string
		cm         *v1.ConfigMap
		readErr    error
		wantLoaded bool
		want       string
	}{
		{name: "fresh", cm: valid(now.Add(-time.Minute)), wantLoaded: true, want: LastDiscoveryHoldsNothing},
		{name: "absent", wantLoaded: true, want: LastDiscoveryNone},
		{name: "unreadable", cm: valid(now), readErr: apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, storeName, errors.New("no")), want: LastDiscoveryNone},
		{name: "does not parse", cm: &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: storeNS, Name: storeName}, Data: map[string]string{DiscoveryStoreKey: "{"}}, wantLoaded: true, want: LastDiscoveryNone},
		{name: "stale", cm: valid(now.Add(-storeStaleAfter - time.Minute)), wantLoaded: true, want: LastDiscoveryNone},
		{name: "from a clock far ahead", cm: valid(now.Add(storeStaleAfter + time.Minute)), wantLoaded: true, want: LastDiscoveryNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &testClock{at: now}
			d := &switchableDiscovery{}
			d.set(true)
			var objs []runtime.Object
			if tc.cm != nil {
				objs = append(objs, tc.cm)
			}
			f := storeFixture(t, clock, d, objs...)
			if tc.readErr != nil {
				f.client.PrependReactor("get", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.readErr
				})
			}
			if got := f.c.loadStore(context.Background()); got != tc.wantLoaded {
				t.Fatalf("loaded = %v, want %v", got, tc.wantLoaded)
			}
			f.discoverNow()
			if got := f.lastDiscovery(harmlessGV).last; got != tc.want {
				t.Fatalf("last discovery %s, want %s", got, tc.want)
			}
			if tc.readErr == nil {
				return
			}
			// A holder that could not read the store never overwrites it.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { f.c.keepStore(ctx); close(done) }()
			f.discoverNow()
			time.Sleep(100 * time.Millisecond)
			cancel()
			<-done
			if w := f.configMapWrites(); len(w) != 0 {
				t.Fatalf("store written without being read: %v", w)
			}
		})
	}
}

// TestSeedLetsOwnObservationsWin: what this process saw answering is not replaced by a stored
// memory, a group never seen answering is not made known by one, and a stored failure moment
// earlier than this process's own first sight is kept (the outage began before it).
func TestSeedLetsOwnObservationsWin(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := newAPIMemory()
	core, _ := coreDiscovery()
	m.observe(t0.Add(5*time.Minute), append(core, holdingList()), []schema.GroupVersion{harmlessGV})
	early := t0.Add(time.Minute)
	n := m.seed(storedMemory{Observed: t0.Add(4 * time.Minute), GroupVersions: map[string]storedGV{
		// The stored memory says the holding group served nothing: this process saw otherwise.
		holdingGV.String():  {Served: t0, Others: []string{"things"}},
		harmlessGV.String(): {Served: t0, Others: []string{"gadgets"}, FailingSince: &early},
		"not/a/version":     {Served: t0},
		// Served after the memory's own time: inconsistent, skipped.
		"late.example.com/v1": {Served: t0.Add(time.Hour)},
	}})
	if n != 1 {
		t.Fatalf("seeded %d entries, want 1", n)
	}
	us := m.unavailable([]schema.GroupVersion{holdingGV, harmlessGV, neverGV})
	if us[0].last != LastDiscoveryHoldsObjects {
		t.Fatalf("holding group: %+v, want what this process saw (holds objects)", us[0])
	}
	if us[1].last != LastDiscoveryHoldsNothing || !us[1].since.Equal(early) {
		t.Fatalf("harmless group: %+v, want holds nothing since %s", us[1], early)
	}
	if us[2].last != LastDiscoveryNone {
		t.Fatalf("never discovered group: %+v, want none", us[2])
	}
}

// TestStoredMemoryIsBounded: over its bounds the store drops what blocks anyway first (groups
// holding objects), and stays under them.
func TestStoredMemoryIsBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := storedMemory{Observed: t0, GroupVersions: map[string]storedGV{}}
	for i := range storeMaxGVs + 100 {
		e := storedGV{Served: t0, Others: []string{"gadgets"}}
		if i%2 == 0 {
			e.Holders = []string{"things"}
		}
		s.GroupVersions[fmt.Sprintf("g%04d.example.com/v1", i)] = e
	}
	b, dropped, err := s.encode()
	if err != nil {
		t.Fatal(err)
	}
	var got storedMemory
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.GroupVersions) > storeMaxGVs || len(b) > storeMaxBytes || dropped != (storeMaxGVs+100)/2 {
		t.Fatalf("%d entries, %d bytes, %d dropped", len(got.GroupVersions), len(b), dropped)
	}
	for name, e := range got.GroupVersions {
		if len(e.Holders) > 0 {
			t.Fatalf("%s holds objects and was kept while others that hold nothing were there", name)
		}
	}
	if len(s.GroupVersions) != storeMaxGVs+100 {
		t.Fatal("encode changed its input")
	}

	// Entries alone over the bound: cut down to it.
	many := storedMemory{Observed: t0, GroupVersions: map[string]storedGV{}}
	for i := range 3 * storeMaxGVs {
		many.GroupVersions[fmt.Sprintf("g%04d.example.com/v1", i)] = storedGV{Served: t0}
	}
	b, _, err = many.encode()
	if err != nil {
		t.Fatal(err)
	}
	got = storedMemory{}
	if err := json.Unmarshal(b, &got); err != nil || len(got.GroupVersions) > storeMaxGVs {
		t.Fatalf("%d entries (%v), want at most %d", len(got.GroupVersions), err, storeMaxGVs)
	}
}

// TestStoreWritesOnChangeOrHeartbeatAndRereadsOnConflict: the holder writes when the memory
// changed or its last write is storeHeartbeat old, not on every discovery; an update that
// conflicts (someone else wrote) makes it read the store again before writing.
func TestStoreWritesOnChangeOrHeartbeatAndRereadsOnConflict(t *testing.T) {
	clock := &testClock{at: time.Now()}
	d := &switchableDiscovery{}
	f := storeFixture(t, clock, d)
	ctx := context.Background()
	f.c.loadStore(ctx)
	f.discoverNow()
	f.c.saveStore(ctx)
	clock.advance(time.Minute)
	f.discoverNow() // nothing changed, a minute later
	f.c.saveStore(ctx)
	if w := f.configMapWrites(); !slices.Equal(w, []string{"create"}) {
		t.Fatalf("writes %v, want one create", w)
	}
	d.set(true)
	clock.advance(time.Second)
	f.discoverNow() // the group fails: a change
	f.c.saveStore(ctx)
	clock.advance(storeHeartbeat)
	f.discoverNow() // the same failure, a heartbeat later
	f.c.saveStore(ctx)
	if w := f.configMapWrites(); !slices.Equal(w, []string{"create", "update", "update"}) {
		t.Fatalf("writes %v, want create, update (change), update (heartbeat)", w)
	}

	f.client.PrependReactor("update", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, storeName, errors.New("changed"))
	})
	clock.advance(storeHeartbeat)
	f.discoverNow()
	if f.c.saveStore(ctx) || f.c.store.kept.Loaded() {
		t.Fatal("a conflicting write must leave the store to be read again")
	}
}
