package churn

import (
	"context"
	"time"
)

// TB is the part of testing.TB that Phases uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Phases times a drill's phases over a started Churn: each phase is a Window from the start of
// its body until, the body done, every controller not paused has acted again.
type Phases struct {
	churn   *Churn
	catchUp time.Duration
	logf    func(string, ...any)
	// Windows are the phases run so far, in order.
	Windows []Window
}

// Phases returns an empty record of phases; catchUp bounds the wait after each body, logf
// tells each phase's start and end.
func (c *Churn) Phases(catchUp time.Duration, logf func(string, ...any)) *Phases {
	return &Phases{churn: c, catchUp: catchUp, logf: logf}
}

// Run runs body as the phase name, waits until the churn has caught up (the test fails when it
// does not within the bound) and records the phase's window, which it returns.
func (p *Phases) Run(ctx context.Context, t TB, name string, body func()) Window {
	t.Helper()
	w := Window{Name: name, Start: time.Now()}
	p.logf("== %s", name)
	body()
	if err := p.churn.WaitCaughtUp(ctx, p.catchUp); err != nil {
		t.Fatalf("%s: a controller's churn never caught up: %v", name, err)
		return w
	}
	w.End = time.Now()
	p.Windows = append(p.Windows, w)
	p.logf("== %s: done in %s", name, w.End.Sub(w.Start).Round(time.Millisecond))
	return w
}
