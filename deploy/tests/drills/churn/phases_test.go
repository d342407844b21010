package churn

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fatals records what Run would fail a test with.
type fatals []string

func (*fatals) Helper() {}

func (f *fatals) Fatalf(format string, args ...any) { *f = append(*f, fmt.Sprintf(format, args...)) }

// A phase lasts from its body's start until the churn acts again after it; one after which a
// controller never acts fails the test, naming the controller, and is not recorded.
func TestPhases(t *testing.T) {
	l := &Loop{name: "x"}
	c := &Churn{loops: []*Loop{l}}
	var logged []string
	p := c.Phases(300*time.Millisecond, func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) })
	var f fatals
	ctx := context.Background()

	before := time.Now()
	w := p.Run(ctx, &f, "acts", func() {
		// A change made and answered after the body: what the wait is for.
		go func() {
			time.Sleep(50 * time.Millisecond)
			now := time.Now()
			l.smu.Lock()
			l.samples = append(l.samples, Sample{What: "change", At: now, Seen: now})
			l.smu.Unlock()
		}()
	})
	if len(f) != 0 {
		t.Fatalf("a phase the churn caught up after failed: %q", f)
	}
	if w.Name != "acts" || w.Start.Before(before) || w.End.Sub(w.Start) < 50*time.Millisecond {
		t.Errorf("window %+v: want from the body's start until the change after it (>= 50ms)", w)
	}
	if len(logged) != 2 || logged[0] != "== acts" || !strings.HasPrefix(logged[1], "== acts: done in ") {
		t.Errorf("logged %q", logged)
	}

	p.Run(ctx, &f, "silent", func() {})
	if len(f) != 1 || !strings.HasPrefix(f[0], "silent: a controller's churn never caught up: ") || !strings.Contains(f[0], ": x: ") {
		t.Errorf("a phase after which x never acted: failures %q", f)
	}
	if len(p.Windows) != 1 || p.Windows[0] != w {
		t.Errorf("windows %+v, want only the first phase's", p.Windows)
	}
}
