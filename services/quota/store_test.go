package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// memClockStore is a clockStore in memory; err fails every call.
type memClockStore struct {
	value  []byte
	found  bool
	loaded bool
	saves  int
	err    error
}

func (s *memClockStore) Name() string { return "quota-controller" + StalenessStoreSuffix }
func (s *memClockStore) Load(context.Context) ([]byte, bool, error) {
	if s.err != nil {
		return nil, false, s.err
	}
	s.loaded = true
	return s.value, s.found, nil
}
func (s *memClockStore) Save(_ context.Context, v []byte) error {
	if s.err != nil || !s.loaded {
		return errors.New("cannot save")
	}
	s.value, s.found = v, true
	s.saves++
	return nil
}
func (s *memClockStore) Loaded() bool { return s.loaded }

type clockFixture struct {
	now time.Time
	s   *staleness
	k   *clockKeeper
}

func newClockFixture(store clockStore, now time.Time) *clockFixture {
	f := &clockFixture{now: now}
	f.s = newStaleness(func() time.Time { return f.now })
	f.k = &clockKeeper{s: f.s, store: store, log: klog.Background(), now: func() time.Time { return f.now }}
	return f
}

// age is the gauge of quota ns/q at the fixture's now.
func (f *clockFixture) age() float64 { return testutil.ToFloat64(f.s) }

// sync is a sync of ns/q at now that counts it in full or not.
func (f *clockFixture) sync(uid types.UID, full bool) {
	f.s.seen("ns/q", f.now)
	if full {
		f.s.counted("ns/q", f.now)
	} else {
		f.s.uncounted("ns/q", uid, f.now)
	}
}

var clock0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// A quota that cannot be counted keeps its age across a handover: the next holder's own sync
// cannot count it either and takes the kept clock. Without the store the gauge restarts.
func TestStalenessClockAcrossHandover(t *testing.T) {
	store := &memClockStore{}
	a := newClockFixture(store, clock0)
	ctx := context.Background()
	if !a.k.load(ctx) || !a.k.save(ctx) || store.saves != 0 {
		t.Fatalf("nothing partial: %d saves, want none (no ConfigMap)", store.saves)
	}
	a.sync("u1", false)
	a.now = clock0.Add(30 * time.Minute)
	a.sync("u1", false)
	if !a.k.save(ctx) || store.saves != 1 {
		t.Fatalf("%d saves after a partial quota, want 1", store.saves)
	}
	// Within the heartbeat nothing more is written; after it, again (freshness).
	a.k.save(ctx)
	a.now = a.now.Add(stalenessHeartbeat)
	a.k.save(ctx)
	if store.saves != 2 {
		t.Fatalf("%d saves after the heartbeat, want 2", store.saves)
	}

	// a is killed; b leads a minute later and cannot count the quota either.
	handover := a.now.Add(time.Minute)
	b := newClockFixture(store, handover)
	b.k.load(ctx)
	b.sync("u1", false)
	if want := handover.Sub(clock0).Seconds(); b.age() != want {
		t.Fatalf("age after the handover %v, want %v (since a's first sight)", b.age(), want)
	}
	// Without the store: the clock restarts at b's first sync.
	c := newClockFixture(&memClockStore{}, handover)
	c.k.load(ctx)
	c.sync("u1", false)
	if c.age() != 0 {
		t.Fatalf("without the store: age %v, want 0", c.age())
	}
	// b counts it: fresh whatever was kept; the entry is written away.
	b.now = b.now.Add(time.Second)
	b.sync("u1", true)
	if b.age() != 0 {
		t.Fatalf("counted in full: age %v, want 0", b.age())
	}
	b.k.save(ctx)
	var kept keptClocks
	if err := json.Unmarshal(store.value, &kept); err != nil || len(kept.Quotas) != 0 {
		t.Fatalf("kept after the full count: %s (%v), want no quota", store.value, err)
	}
}

// A kept clock is taken only when consistent with what the next holder sees.
func TestStalenessClockChecked(t *testing.T) {
	for _, tc := range []struct {
		name     string
		observed time.Duration // before the handover
		uid      types.UID
		full     bool
		take     bool
	}{
		{"fresh, same quota, uncountable", time.Minute, "u1", false, true},
		{"another quota of the same name", time.Minute, "u2", false, false},
		{"counted now", time.Minute, "u1", true, false},
		{"written too long ago", stalenessStaleAfter + time.Second, "u1", false, false},
		{"written in the future (another clock)", -stalenessStaleAfter - time.Second, "u1", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handover := clock0.Add(time.Hour)
			b, _ := json.Marshal(keptClocks{Observed: handover.Add(-tc.observed), Quotas: map[string]keptClock{"ns/q": {UID: "u1", Since: clock0}}})
			f := newClockFixture(&memClockStore{value: b, found: true}, handover)
			f.k.load(context.Background())
			f.sync(tc.uid, tc.full)
			if taken := f.age() > 0; taken != tc.take {
				t.Fatalf("age %v: taken %v, want %v", f.age(), taken, tc.take)
			}
		})
	}
}

// A read that comes after the first partial sync still gives it its clock; a store that
// cannot be read gives nothing and is never written.
func TestStalenessClockOrderAndUnreadable(t *testing.T) {
	handover := clock0.Add(time.Hour)
	b, _ := json.Marshal(keptClocks{Observed: handover.Add(-time.Minute), Quotas: map[string]keptClock{"ns/q": {UID: "u1", Since: clock0}}})
	store := &memClockStore{value: b, found: true}
	f := newClockFixture(store, handover)
	f.sync("u1", false)
	f.k.load(context.Background())
	if f.age() != time.Hour.Seconds() {
		t.Fatalf("age %v after a late read, want 3600", f.age())
	}

	down := &memClockStore{err: errors.New("forbidden")}
	g := newClockFixture(down, handover)
	if g.k.load(context.Background()) {
		t.Fatal("a failed read loaded")
	}
	g.sync("u1", false)
	if g.age() != 0 || g.k.save(context.Background()) || down.saves != 0 {
		t.Fatalf("unreadable store: age %v, saves %d; want 0, none", g.age(), down.saves)
	}
}

// The kept clocks are bounded: the ones that started last are dropped.
func TestStalenessClocksBounded(t *testing.T) {
	f := newClockFixture(&memClockStore{}, clock0)
	for i := range stalenessMaxQuotas + 10 {
		qkey := fmt.Sprintf("ns/q%05d", i)
		f.s.seen(qkey, clock0.Add(time.Duration(i)*time.Second))
		f.s.uncounted(qkey, types.UID(qkey), clock0)
	}
	snap := f.s.snapshot(clock0.Add(time.Hour))
	if len(snap.Quotas) != stalenessMaxQuotas {
		t.Fatalf("%d kept, want %d", len(snap.Quotas), stalenessMaxQuotas)
	}
	if _, ok := snap.Quotas[fmt.Sprintf("ns/q%05d", stalenessMaxQuotas+9)]; ok {
		t.Fatal("the clock that started last was kept over the bound")
	}
	if b, _ := json.Marshal(snap); len(b) > 256<<10 {
		t.Fatalf("%d bytes at the bound, over 256 KiB", len(b))
	}
}
