package nodelifecycle

import (
	"testing"
	"time"
)

func drain(z *zoneTainter, at time.Time) []string {
	var out []string
	for {
		n, ok := z.next(at)
		if !ok {
			return out
		}
		out = append(out, n)
	}
}

func TestZoneTainterRateBurstAndSettle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	z := newZoneTainter(0.1, 5*time.Second)
	for _, n := range []string{"a", "b", "c"} {
		z.add(n, t0)
	}
	if z.add("a", t0.Add(time.Second)) {
		t.Error("a queued Node was added twice")
	}
	if got := drain(z, t0.Add(4*time.Second)); len(got) != 0 {
		t.Errorf("before the settle wait: %v", got)
	}
	// Burst 1: one at once, the next 10 s later at 0.1/s.
	if got := drain(z, t0.Add(5*time.Second)); len(got) != 1 || got[0] != "a" {
		t.Errorf("after settling: %v, want [a]", got)
	}
	if got := drain(z, t0.Add(14*time.Second)); len(got) != 0 {
		t.Errorf("9 s later: %v, want none", got)
	}
	if got := drain(z, t0.Add(15*time.Second)); len(got) != 1 || got[0] != "b" {
		t.Errorf("10 s later: %v, want [b]", got)
	}
	// Paused: nothing, however long; resuming grants no extra burst.
	z.setRate(0, t0.Add(15*time.Second))
	if got := drain(z, t0.Add(time.Hour)); len(got) != 0 {
		t.Errorf("paused: %v", got)
	}
	if z.pending() != 1 {
		t.Errorf("pending = %d, want 1", z.pending())
	}
	z.setRate(1, t0.Add(time.Hour))
	if got := drain(z, t0.Add(time.Hour)); len(got) != 1 || got[0] != "c" {
		t.Errorf("resumed: %v, want [c]", got)
	}
}

func TestZoneTainterRemoveAndRetry(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	z := newZoneTainter(100, 0)
	z.add("a", t0)
	z.add("b", t0)
	if !z.remove("a") || z.remove("a") {
		t.Error("remove should report a queued Node once")
	}
	n, ok := z.next(t0)
	if !ok || n != "b" {
		t.Fatalf("next = %q, %v", n, ok)
	}
	z.retry("b", t0)
	z.clear()
	if z.pending() != 0 {
		t.Error("clear left Nodes queued")
	}
}
