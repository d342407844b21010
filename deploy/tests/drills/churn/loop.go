package churn

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PollEvery is how often a loop checks for its change's effect, and Pause how long it waits
// after an effect appeared before its next change.
const (
	PollEvery = 100 * time.Millisecond
	Pause     = 500 * time.Millisecond
)

// Sample is one change and its effect.
type Sample struct {
	// What the change was ("Pod web ready=false").
	What string
	// At is when the change was made (for a silent Node: when its grace period ran out).
	At time.Time
	// Seen is when its effect was first observed; zero when it never was (lost).
	Seen time.Time
}

// Lost reports whether the change's effect never appeared.
func (s Sample) Lost() bool { return s.Seen.IsZero() }

// waited is how long the change waited for its effect (until now while none appeared).
func (s Sample) waited(now time.Time) time.Duration {
	if s.Seen.IsZero() {
		return now.Sub(s.At)
	}
	return s.Seen.Sub(s.At)
}

// pendingIn reports whether the change was pending at some time during w (made before w and
// answered during it counts).
func (s Sample) pendingIn(w Window, now time.Time) bool {
	end := s.Seen
	if end.IsZero() {
		end = now
	}
	return !end.Before(w.Start) && !s.At.After(w.End)
}

// Window is a named stretch of time: a phase of a test.
type Window struct {
	Name       string
	Start, End time.Time
}

// step makes change i and returns when it counts from, what it is and what shows its effect.
type step func(ctx context.Context, i int) (at time.Time, what string, effect func(context.Context) (bool, error), err error)

// Loop drives one controller: one change at a time, each timed until its effect appears.
type Loop struct {
	name string
	step step
	// after runs once change i's effect is in place (cleanup that keeps the objects few).
	after func(ctx context.Context, i int)
	// final reports whether the controller's end state holds every change's effect, and what
	// it looked for.
	final func(ctx context.Context) (bool, string, error)

	effectTimeout time.Duration
	logf          func(string, ...any)

	mu      sync.Mutex // held for a whole step: Pause waits for the one in flight
	paused  atomic.Bool
	smu     sync.Mutex // guards samples (mu is held for seconds)
	samples []Sample
	errors  atomic.Int64
	done    chan struct{}
}

// Name is the controller's: one of All.
func (l *Loop) Name() string { return l.name }

// run loops until ctx ends; the step in flight then completes (its effect awaited, bounded).
func (l *Loop) run(ctx context.Context) {
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		for i := 0; ctx.Err() == nil; i++ {
			if l.paused.Load() {
				i--
				sleep(ctx, PollEvery)
				continue
			}
			l.mu.Lock()
			if l.paused.Load() { // paused while this loop waited for mu
				l.mu.Unlock()
				i--
				continue
			}
			l.once(i)
			l.mu.Unlock()
			sleep(ctx, Pause)
		}
	}()
}

func (l *Loop) once(i int) {
	ctx, cancel := context.WithTimeout(context.Background(), l.effectTimeout+30*time.Second)
	defer cancel()
	at, what, effect, err := l.step(ctx, i)
	if err != nil {
		l.errors.Add(1)
		l.logf("churn %s step %d: %v", l.name, i, err)
		return
	}
	s := Sample{What: what, At: at}
	err = wait.PollUntilContextTimeout(ctx, PollEvery, l.effectTimeout, true, func(ctx context.Context) (bool, error) {
		ok, err := effect(ctx)
		if err != nil {
			l.logf("churn %s step %d: checking the effect: %v", l.name, i, err)
		}
		return ok, nil
	})
	if err == nil {
		s.Seen = time.Now()
		if l.after != nil {
			l.after(ctx, i)
		}
	} else {
		l.logf("churn %s: LOST %s (made %s, no effect within %s)", l.name, what, at.Format(time.StampMilli), l.effectTimeout)
	}
	l.record(s)
}

func (l *Loop) record(s Sample) {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.samples = append(l.samples, s)
}

// Samples are the loop's changes so far, oldest first.
func (l *Loop) Samples() []Sample {
	l.smu.Lock()
	defer l.smu.Unlock()
	return slices.Clone(l.samples)
}

// Pause stops the loop after the change in flight, whose effect it awaits (up to the effect
// timeout): for a controller no one runs for a while.
func (l *Loop) Pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paused.Store(true)
}

// Resume lets a paused loop go on.
func (l *Loop) Resume() { l.paused.Store(false) }

// Paused reports whether the loop is paused.
func (l *Loop) Paused() bool { return l.paused.Load() }

// CaughtUp reports whether a change made after since has had its effect (or the loop is
// paused).
func (l *Loop) CaughtUp(since time.Time) bool {
	if l.paused.Load() {
		return true
	}
	for _, s := range l.Samples() {
		if s.At.After(since) && !s.Seen.IsZero() {
			return true
		}
	}
	return false
}

// Gap is the longest wait among the loop's changes pending at any time during w (a change made
// before w whose effect came during it counts too; one never answered counts until now), and
// how many changes that covers: the longest time nothing acted on the controller's objects.
func (l *Loop) Gap(w Window) (time.Duration, int) {
	var worst time.Duration
	n := 0
	now := time.Now()
	for _, s := range l.Samples() {
		if !s.pendingIn(w, now) {
			continue
		}
		n++
		worst = max(worst, s.waited(now))
	}
	return worst, n
}

// Slow returns the loop's changes pending during w that waited longer than d.
func (l *Loop) Slow(w Window, d time.Duration) []Sample {
	var out []Sample
	now := time.Now()
	for _, s := range l.Samples() {
		if s.pendingIn(w, now) && s.waited(now) > d {
			out = append(out, s)
		}
	}
	return out
}

// Lost is the number of the loop's changes whose effect never appeared.
func (l *Loop) Lost() int {
	n := 0
	for _, s := range l.Samples() {
		if s.Lost() {
			n++
		}
	}
	return n
}

// StepErrors is the number of changes the loop failed to make (an API error): not lost work,
// the controller was never asked.
func (l *Loop) StepErrors() int64 { return l.errors.Load() }

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
