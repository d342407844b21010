package benchkit

import (
	"fmt"
	"testing"
	"time"
)

// Pacing shared by the benchmarks, so that their numbers are taken the same way.
const (
	// CreateWorkers is the fixture-creation concurrency: fast enough to set up thousands of
	// objects in seconds, low enough not to starve the apiserver on a 2-core machine.
	CreateWorkers = 16
	// FloorSamples is how many write-and-observe hops the floor is measured over.
	FloorSamples = 200
	// FloorPause separates floor samples, so that each is one hop on an otherwise idle
	// apiserver.
	FloorPause = 10 * time.Millisecond
	// IdleSettle lets a controller finish whatever follows its cold sync (GC, trailing
	// events) before idle RSS, CPU and cold-sync writes are read.
	IdleSettle = 5 * time.Second
	// QuietSettle is how long to wait after the last expected write before counting, so that a
	// stray extra write is counted rather than missed.
	QuietSettle = 2 * time.Second
)

// ColdStart is what a benchmark measures up to its controller's first idle moment.
type ColdStart struct {
	// Floor is the write-and-observe hop before any controller runs (MeasureFloor).
	Floor []time.Duration
	// Setup is the time creating the fixtures took: context only, it shows both control
	// planes were equally fast.
	Setup time.Duration
	// Sync is process start -> the benchmark's watcher sees the converged state.
	Sync time.Duration
	// Writes are the controller's writes until idle.
	Writes int
	// CPU is the process's CPU time at idle.
	CPU time.Duration
	// IdleRSS and IdleAnon are VmRSS and its RssAnon part at idle.
	IdleRSS, IdleAnon int64
}

// SettleIdle waits IdleSettle, then reads the process's idle RSS, RssAnon and CPU time.
func (c *ColdStart) SettleIdle(p *Process) {
	time.Sleep(IdleSettle)
	m := p.Memory()
	c.IdleRSS, c.IdleAnon = m.RSS, m.Anon
	c.CPU = p.CPU()
}

// AddColdStart appends the rows of a ColdStart: floor p50/p99, fixture setup, cold sync, its
// writes (of kind, e.g. "Endpoints", with the target count a correct controller makes), its
// CPU, idle RSS and the anonymous part of it.
func (rs *Rows[R]) AddColdStart(get func(*R) *ColdStart, kind string, target int) {
	rs.AddPercentiles("floor latency", func(r *R) []time.Duration { return get(r).Floor }, "%.1f", 50, 99)
	rs.AddSeconds("fixture setup, context (s)", func(r *R) time.Duration { return get(r).Setup }, "%.1f")
	rs.AddSeconds("cold sync (s)", func(r *R) time.Duration { return get(r).Sync }, "%.2f")
	rs.AddCount(fmt.Sprintf("cold sync %s writes (target %d)", kind, target), func(r *R) int { return get(r).Writes })
	rs.AddSeconds("cold sync CPU (s)", func(r *R) time.Duration { return get(r).CPU }, "%.2f")
	rs.AddMiB("idle RSS (MiB)", func(r *R) int64 { return get(r).IdleRSS })
	rs.AddMiB("  of which anonymous, RssAnon (MiB)", func(r *R) int64 { return get(r).IdleAnon })
}

// MeasureFloor times FloorSamples write-and-observe hops, FloorPause apart. For sample i, hop
// registers what the benchmark's watcher must see (an Observer's When, registered before the
// write so no event slips between) and returns it with the write that causes it. A hop is
// timed from issuing the write, not from its response: the apiserver sends the watch event and
// the response together, so response -> event is about zero and says nothing. A controller
// reacting to a change with a write makes at least one such hop, so this bounds its latency
// from below.
func MeasureFloor(tb testing.TB, timeout time.Duration, hop func(i int) (seen <-chan time.Time, write func())) []time.Duration {
	tb.Helper()
	out := make([]time.Duration, 0, FloorSamples)
	for i := range FloorSamples {
		seen, write := hop(i)
		issued := time.Now()
		write()
		select {
		case at := <-seen:
			out = append(out, at.Sub(issued))
		case <-time.After(timeout):
			tb.Fatalf("floor: the watcher never saw write %d within %s", i, timeout)
		}
		time.Sleep(FloorPause)
	}
	return out
}
