package allocation

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestOverwriteBackoff(t *testing.T) {
	ours := []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	theirs := []v1.LoadBalancerIngress{{IP: "198.51.100.1"}}
	s := New()
	now := time.Unix(1000, 0)
	if w, ep, rw := s.OverwriteBackoff("ns/a", "uid-a", theirs, ours, now); w != 0 || ep || rw {
		t.Fatalf("nothing written yet: %v %v %v", w, ep, rw)
	}
	s.lastWritten["ns/a"] = ours
	if w, ep, rw := s.OverwriteBackoff("ns/a", "uid-a", ours, ours, now); w != 0 || ep || rw {
		t.Fatalf("status is ours: %v %v %v", w, ep, rw)
	}
	type step struct {
		after   time.Duration
		wait    time.Duration
		episode bool
		rewrite bool
	}
	for i, st := range []step{
		{0, 0, true, true}, // put back at once, new episode
		{time.Second, overwriteBase - time.Second, false, false}, // then wait for the base
		{overwriteBase, 0, false, true},
		{time.Second, 2*overwriteBase - time.Second, false, false}, // doubling
		{2 * overwriteBase, 0, false, true},
		{4 * overwriteBase, 0, false, true},
		{8 * overwriteBase, 0, false, true},
		{overwriteSlow - time.Second, time.Second, false, false}, // capped at overwriteSlow
		{time.Second, 0, false, true},
		{overwriteSlow + overwriteQuiet + time.Minute, 0, true, true}, // quiet long enough: a new episode
	} {
		now = now.Add(st.after)
		w, ep, rw := s.OverwriteBackoff("ns/a", "uid-a", theirs, ours, now)
		if w != st.wait || ep != st.episode || rw != st.rewrite {
			t.Fatalf("step %d: wait %v episode %v rewrite %v, want %+v", i, w, ep, rw, st)
		}
	}
}

// An episode kept by the previous Lease holder goes on at the next one: no new episode, the
// backoff step where it was; believed only for the same Service still wanting what was
// written and showing something else.
func TestKeptOverwritesResume(t *testing.T) {
	ours := []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	theirs := []v1.LoadBalancerIngress{{IP: "198.51.100.1"}}
	other := []v1.LoadBalancerIngress{{IP: "192.0.2.9"}}
	t0 := time.Unix(1000, 0)
	a := New()
	a.Wrote("ns/a", ours)
	a.Wrote("ns/b", ours)
	for i := range 3 { // three rewrites: attempts 3, next write 20 s after the third
		now := t0.Add(time.Duration(i) * time.Minute)
		if _, _, rw := a.OverwriteBackoff("ns/a", "uid-a", theirs, ours, now); !rw {
			t.Fatalf("rewrite %d not allowed", i)
		}
	}
	if got := len(a.KeptOverwrites(t0).Episodes); got != 1 {
		t.Fatalf("%d episodes kept, want 1 (ns/b has none)", got)
	}
	kept := a.KeptOverwrites(t0.Add(2 * time.Minute))
	at := t0.Add(2*time.Minute + 5*time.Second) // the handover: 5 s later

	b := New()
	if n := b.ResumeOverwrites(kept, at); n != 1 {
		t.Fatalf("took %d, want 1", n)
	}
	if again := b.KeptOverwrites(at); len(again.Episodes) != 1 || again.Episodes[0].Attempts != 3 {
		t.Fatalf("an unmatched kept episode is kept on: %+v", again)
	}
	w, ep, rw := b.OverwriteBackoff("ns/a", "uid-a", theirs, ours, at)
	if w != 15*time.Second || ep || rw {
		t.Fatalf("first decision after the handover: wait %v episode %v rewrite %v, want 15s, false, false", w, ep, rw)
	}
	if w, ep, rw := b.OverwriteBackoff("ns/a", "uid-a", theirs, ours, at.Add(15*time.Second)); w != 0 || ep || !rw {
		t.Fatalf("at the kept backoff's end: wait %v episode %v rewrite %v", w, ep, rw)
	}
	if k := b.KeptOverwrites(at.Add(15 * time.Second)); len(k.Episodes) != 1 || k.Episodes[0].Attempts != 4 || !k.Episodes[0].Start.Equal(t0) {
		t.Fatalf("the episode goes on from the kept one: %+v", k)
	}

	for name, tc := range map[string]struct {
		uid            string
		status, wanted []v1.LoadBalancerIngress
		kept           KeptOverwrites
		at             time.Time
	}{
		"another Service of the same name": {"uid-x", theirs, ours, kept, at},
		"it wants another address now":     {"uid-a", theirs, other, kept, at},
		"its status is ours again":         {"uid-a", ours, other, kept, at},
		"stale":                            {"uid-a", theirs, ours, kept, at.Add(overwriteQuiet + time.Second)},
		"written in the future":            {"uid-a", theirs, ours, KeptOverwrites{Observed: at.Add(2 * keptSkew), Episodes: kept.Episodes}, at},
	} {
		c := New()
		c.ResumeOverwrites(tc.kept, tc.at)
		w, ep, rw := c.OverwriteBackoff("ns/a", types.UID(tc.uid), tc.status, tc.wanted, tc.at)
		if w != 0 || ep || rw {
			t.Errorf("%s: wait %v episode %v rewrite %v, want what a holder that never knew decides", name, w, ep, rw)
		}
		if len(c.KeptOverwrites(tc.at).Episodes) != 0 {
			t.Errorf("%s: the kept entry is kept on", name)
		}
	}

	// This term's own write wins over a kept entry.
	d := New()
	d.ResumeOverwrites(kept, at)
	d.Wrote("ns/a", ours)
	if w, ep, _ := d.OverwriteBackoff("ns/a", "uid-a", theirs, ours, at); w != 0 || !ep {
		t.Fatalf("after its own write: wait %v episode %v, want a new episode", w, ep)
	}
}

func TestKeptOverwritesBounded(t *testing.T) {
	ours := []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	theirs := []v1.LoadBalancerIngress{{IP: "198.51.100.1"}}
	t0 := time.Unix(1000, 0)
	s := New()
	for i := range MaxKeptOverwrites + 10 {
		key := fmt.Sprintf("ns/s%d", i)
		s.Wrote(key, ours)
		s.OverwriteBackoff(key, types.UID(key), theirs, ours, t0.Add(time.Duration(i)*time.Millisecond))
	}
	k := s.KeptOverwrites(t0.Add(time.Second))
	if len(k.Episodes) != MaxKeptOverwrites || k.Episodes[0].Key != fmt.Sprintf("ns/s%d", MaxKeptOverwrites+9) {
		t.Fatalf("%d kept, first %s: want the %d seen last", len(k.Episodes), k.Episodes[0].Key, MaxKeptOverwrites)
	}
	if b, err := json.Marshal(k); err != nil || len(b) > KeptOverwritesMaxBytes {
		t.Fatalf("%d bytes (%v), bound %d", len(b), err, KeptOverwritesMaxBytes)
	}
	if n := New().ResumeOverwrites(k, t0.Add(time.Second)); n != MaxKeptOverwrites {
		t.Fatalf("took %d", n)
	}
}
