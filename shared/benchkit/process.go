package benchkit

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Process is a controller (ours or upstream) a benchmark started. Its methods fail the
// benchmark when what they read cannot be read, so scenarios stay free of error plumbing.
type Process struct {
	*testenv.Process
	// Started is when the process was started: cold sync and restart times count from it.
	Started time.Time
	tb      testing.TB
}

// Start runs bin with args, logging to a file in tb's temporary directory. The process never
// outlives the benchmark; it is killed when tb ends, and the end of its log is printed if tb
// failed.
func Start(tb testing.TB, name, bin string, args ...string) *Process {
	tb.Helper()
	started := time.Now()
	p, err := testenv.StartProcess(name, filepath.Join(tb.TempDir(), name+".log"), bin, args...)
	if err != nil {
		tb.Fatal(err)
	}
	proc := &Process{Process: p, Started: started, tb: tb}
	tb.Cleanup(func() {
		p.Kill()
		if tb.Failed() {
			tb.Logf("--- last lines of the %s log (%s) ---\n%s", name, p.Log, p.Tail(40))
		}
	})
	return proc
}

// Await waits for ch and returns the time it delivers, failing the benchmark when the process
// exits or timeout passes first. what names the awaited state in the failure.
func (p *Process) Await(ch <-chan time.Time, timeout time.Duration, what string) time.Time {
	p.tb.Helper()
	select {
	case at := <-ch:
		return at
	case <-p.Done():
		p.tb.Fatalf("%s exited (%v) while waiting for %s", p.Name, p.Cmd.ProcessState, what)
	case <-time.After(timeout):
		p.tb.Fatalf("%s: no %s within %s", p.Name, what, timeout)
	}
	return time.Time{}
}

// WaitUntil polls cond every 50 ms until it holds, failing the benchmark (with the end of the
// log) when the process exits or timeout passes first.
func (p *Process) WaitUntil(timeout time.Duration, what string, cond func() bool) {
	p.tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if p.Exited() {
			p.tb.Fatalf("%s exited while waiting for %s:\n%s", p.Name, what, p.Tail(30))
		}
		if time.Now().After(deadline) {
			p.tb.Fatalf("%s: no %s within %s:\n%s", p.Name, what, timeout, p.Tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Shutdown sends SIGTERM and waits StopTimeout for a graceful exit; past it the process is
// killed, the benchmark is marked failed and Shutdown returns false.
func (p *Process) Shutdown() bool {
	p.tb.Helper()
	if !p.Stop(StopTimeout) {
		p.tb.Errorf("%s did not exit within %s of SIGTERM", p.Name, StopTimeout)
		return false
	}
	return true
}

// CPU returns the user + system CPU time the process has used so far.
func (p *Process) CPU() time.Duration {
	p.tb.Helper()
	d, err := ReadCPU(p.Cmd.Process.Pid)
	if err != nil {
		p.tb.Fatalf("%s: %v", p.Name, err)
	}
	return d
}

// Memory returns the process's memory now.
func (p *Process) Memory() Memory {
	p.tb.Helper()
	m, err := ReadMemory(p.Cmd.Process.Pid)
	if err != nil {
		p.tb.Fatalf("%s: %v", p.Name, err)
	}
	return m
}

// SampleRSS keeps the largest VmRSS seen, read every interval, in *peak until the returned stop
// is called (which takes one last sample). A failed read is skipped: the process dying is
// reported by whoever waits on it. *peak is written only by the sampler until stop returns.
func (p *Process) SampleRSS(peak *int64, every time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	sample := func() {
		if m, err := ReadMemory(p.Cmd.Process.Pid); err == nil && m.RSS > *peak {
			*peak = m.RSS
		}
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-p.Done():
				return
			case <-t.C:
				sample()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-finished
			sample()
		})
	}
}

// Progress returns a logger for one side's progress lines on stderr, each stamped with the
// seconds since Progress was called. go test shows them live, unlike b.Logf.
func Progress(name string) func(format string, args ...any) {
	start := time.Now()
	return func(format string, args ...any) {
		fmt.Fprintf(stderr, "bench %-30s %6.1fs  %s\n", name, time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
}
