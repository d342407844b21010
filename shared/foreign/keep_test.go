package foreign

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// memStore is a Store in memory; err fails every call.
type memStore struct {
	value  []byte
	found  bool
	loaded bool
	saves  int
	err    error
}

func (s *memStore) Name() string { return "lease" + EpisodesSuffix }
func (s *memStore) Load(context.Context) ([]byte, bool, error) {
	if s.err != nil {
		s.loaded = false
		return nil, false, s.err
	}
	s.loaded = true
	return s.value, s.found, nil
}
func (s *memStore) Save(_ context.Context, v []byte) error {
	if s.err != nil {
		return s.err
	}
	if !s.loaded {
		return errors.New("not loaded")
	}
	s.value, s.found = v, true
	s.saves++
	return nil
}
func (s *memStore) Loaded() bool { return s.loaded }

func (s *memStore) kept(t *testing.T) keptEpisodes {
	t.Helper()
	var k keptEpisodes
	if err := json.Unmarshal(s.value, &k); err != nil {
		t.Fatalf("kept value %q: %v", s.value, err)
	}
	return k
}

func keeperOf(f *fixture, s Store) *keeper {
	return &keeper{d: f.d, s: s, log: logr.Discard()}
}

func kcmWrite(at time.Time) *corev1.ConfigMap {
	return endpoints("u1", entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", at, subsets))
}

// termAt is a new term's Detector (a new leader, or the same process again) at now, tracking
// the fixture's controller, that has kept nothing yet.
func termAt(t *testing.T, now time.Time) *fixture {
	f := newFixture(t, Options{})
	f.clock.t = now
	f.d.Track(f.target)
	return f
}

// A writer still at it across a handover is one episode: the next holder takes the episode
// over from the store and reports nothing; without the store it reports again.
func TestEpisodeContinuesAcrossHandover(t *testing.T) {
	s := &memStore{}
	a := termAt(t, t0)
	ka := keeperOf(a, s)
	if !ka.load(context.Background()) || !ka.save(context.Background()) || s.saves != 0 {
		t.Fatalf("with no episode: loaded and saved %d times, want nothing written", s.saves)
	}
	a.d.Observe(a.target, kcmWrite(a.clock.step(time.Second)))
	if a.count() != 1 || !ka.save(context.Background()) || s.saves != 1 {
		t.Fatalf("first episode: counter %v, saves %d; want 1, 1", a.count(), s.saves)
	}
	start := a.clock.t
	// Within the heartbeat a sighting is not written; after it, it is.
	a.d.Observe(a.target, kcmWrite(a.clock.step(10*time.Second)))
	ka.save(context.Background())
	if s.saves != 1 {
		t.Fatalf("a sighting within the heartbeat was written (%d saves)", s.saves)
	}
	a.clock.step(keepHeartbeat)
	a.d.Observe(a.target, kcmWrite(a.clock.t))
	ka.save(context.Background())
	if k := s.kept(t); s.saves != 2 || len(k.Episodes) != 1 || !k.Episodes[0].Start.Equal(start) || !k.Episodes[0].Last.Equal(a.clock.t) {
		t.Fatalf("after the heartbeat: %d saves, kept %+v; want 2, the episode from %s last seen %s", s.saves, k, start, a.clock.t)
	}

	// a is killed; b starts 30 s later and sees kube-controller-manager write again.
	handover := a.clock.t.Add(30 * time.Second)
	b := termAt(t, handover)
	if kb := keeperOf(b, s); !kb.load(context.Background()) {
		t.Fatal("b could not load")
	}
	b.d.Observe(b.target, kcmWrite(b.clock.step(time.Second)))
	if b.count() != 0 || len(b.events()) != 0 {
		t.Fatalf("b reported the episode a had reported: counter %v, events %q", b.count(), b.events())
	}
	if e := b.d.episodes[episodeKey{"endpoints", "kube-controller-manager"}]; !e.start.Equal(start) {
		t.Fatalf("b's episode starts %s, want a's %s", e.start, start)
	}

	// The same without the store: reported again (today's behaviour).
	c := termAt(t, handover)
	c.d.Observe(c.target, kcmWrite(c.clock.step(time.Second)))
	if c.count() != 1 || len(c.events()) != 1 {
		t.Fatalf("without the store: counter %v, events %q; want the episode reported again", c.count(), c.events())
	}
}

// What is kept is believed only when it can be: an episode quiet for the quiet period, one
// of a controller not tracked, one seen far in the future or starting after it was last seen
// is not taken, and its writer is reported as by a Detector that never knew.
func TestKeptEpisodesChecked(t *testing.T) {
	now := t0.Add(time.Hour)
	for _, tc := range []struct {
		name string
		e    keptEpisode
		take bool
	}{
		{"in progress", keptEpisode{"endpoints", "kube-controller-manager", now.Add(-time.Hour), now.Add(-time.Minute)}, true},
		{"slightly in the future (another clock)", keptEpisode{"endpoints", "kube-controller-manager", now.Add(-time.Minute), now.Add(30 * time.Second)}, true},
		{"quiet for the period", keptEpisode{"endpoints", "kube-controller-manager", now.Add(-time.Hour), now.Add(-DefaultQuietPeriod)}, false},
		{"far in the future", keptEpisode{"endpoints", "kube-controller-manager", now, now.Add(2 * keepSkew)}, false},
		{"start after last", keptEpisode{"endpoints", "kube-controller-manager", now.Add(-time.Second), now.Add(-time.Minute)}, false},
		{"a controller not tracked", keptEpisode{"mirroring", "kube-controller-manager", now.Add(-time.Hour), now.Add(-time.Minute)}, false},
		{"our own manager", keptEpisode{"endpoints", "endpoints-controller", now.Add(-time.Hour), now.Add(-time.Minute)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(keptEpisodes{Observed: now, Episodes: []keptEpisode{tc.e}})
			f := termAt(t, now)
			keeperOf(f, &memStore{value: b, found: true}).load(context.Background())
			f.d.Observe(f.target, kcmWrite(f.clock.step(time.Second)))
			if reported := f.count() == 1; reported == tc.take {
				t.Errorf("taken %v, but the writer reported: %v", tc.take, reported)
			}
		})
	}
}

// A store that cannot be read or parsed is no episode: the writer is reported; an unread
// store is never written, an unparsable one is overwritten.
func TestUnreadableStore(t *testing.T) {
	down := &memStore{err: errors.New("forbidden")}
	f := termAt(t, t0)
	k := keeperOf(f, down)
	if k.load(context.Background()) {
		t.Fatal("a failed read loaded")
	}
	f.d.Observe(f.target, kcmWrite(f.clock.step(time.Second)))
	if f.count() != 1 {
		t.Fatalf("counter %v with the store unreadable, want 1", f.count())
	}
	if k.save(context.Background()) || down.saves != 0 {
		t.Fatal("saved with the store unreadable")
	}

	garbled := &memStore{value: []byte("{not json"), found: true}
	g := termAt(t, t0)
	kg := keeperOf(g, garbled)
	if !kg.load(context.Background()) {
		t.Fatal("an unparsable value did not load")
	}
	if !kg.save(context.Background()) || garbled.saves != 1 || len(garbled.kept(t).Episodes) != 0 {
		t.Fatalf("unparsable value not replaced: saves %d, value %q", garbled.saves, garbled.value)
	}
}

// An episode that ends is written out once; then nothing more.
func TestEndedEpisodeWrittenOnce(t *testing.T) {
	s := &memStore{}
	f := termAt(t, t0)
	k := keeperOf(f, s)
	k.load(context.Background())
	f.d.Observe(f.target, kcmWrite(f.clock.step(time.Second)))
	k.save(context.Background())
	f.clock.step(DefaultQuietPeriod)
	k.save(context.Background())
	k.save(context.Background())
	if s.saves != 2 || len(s.kept(t).Episodes) != 0 {
		t.Fatalf("%d saves, kept %s; want 2, none in progress", s.saves, s.value)
	}
}

// The kept value is bounded by MaxEpisodes.
func TestKeptBounded(t *testing.T) {
	f := newFixture(t, Options{MaxEpisodes: 3})
	f.d.Track(f.target)
	var kept keptEpisodes
	for i := range 10 {
		kept.Episodes = append(kept.Episodes, keptEpisode{"endpoints", string(rune('a' + i)), t0.Add(-time.Minute), t0})
	}
	if n := f.d.resume(kept, t0); n != 3 || len(f.d.snapshot(t0).Episodes) != 3 {
		t.Fatalf("took %d of 10 with MaxEpisodes 3", n)
	}
}
