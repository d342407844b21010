package allocation

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func TestOverwriteBackoff(t *testing.T) {
	ours := []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	theirs := []v1.LoadBalancerIngress{{IP: "198.51.100.1"}}
	s := New()
	now := time.Unix(1000, 0)
	if w, ep, rw := s.OverwriteBackoff("ns/a", theirs, ours, now); w != 0 || ep || rw {
		t.Fatalf("nothing written yet: %v %v %v", w, ep, rw)
	}
	s.lastWritten["ns/a"] = ours
	if w, ep, rw := s.OverwriteBackoff("ns/a", ours, ours, now); w != 0 || ep || rw {
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
		w, ep, rw := s.OverwriteBackoff("ns/a", theirs, ours, now)
		if w != st.wait || ep != st.episode || rw != st.rewrite {
			t.Fatalf("step %d: wait %v episode %v rewrite %v, want %+v", i, w, ep, rw, st)
		}
	}
}
