package bench

// The harness: the benchmark's own watcher, the controller process and its resource usage.
// It mirrors services/endpoints/bench so that both benchmarks measure the same way.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// parallel runs fn for 0..n-1 on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// observer mirrors one resource through an informer and tells waiters when the mirror first
// satisfies their condition, with the time the informer delivered the event that made it so.
// Waiters register before the write they wait for, so no event can slip between.
type observer[T metav1.Object] struct {
	mu      sync.Mutex
	objs    map[string]T
	waiters []*waiter[T]
}

type waiter[T metav1.Object] struct {
	key string       // "" means the condition is on all objects
	one func(T) bool // when key != ""
	all func(map[string]T) bool
	ch  chan time.Time // buffered: firing never blocks the informer
}

func newObserver[T metav1.Object](ctx context.Context, b *testing.B, client kubernetes.Interface, ns string, informer func(informers.SharedInformerFactory) cache.SharedIndexInformer) *observer[T] {
	b.Helper()
	o := &observer[T]{objs: map[string]T{}}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := informer(factory)
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.observe(obj, false) },
		UpdateFunc: func(_, obj any) { o.observe(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			o.observe(obj, true)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	factory.Start(ctx.Done())
	b.Cleanup(factory.Shutdown)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		b.Fatal("the benchmark's own informer never synced")
	}
	return o
}

func (o *observer[T]) observe(obj any, deleted bool) {
	at := time.Now()
	t, ok := obj.(T)
	if !ok {
		return
	}
	key := t.GetNamespace() + "/" + t.GetName()
	o.mu.Lock()
	defer o.mu.Unlock()
	if deleted {
		delete(o.objs, key)
	} else {
		o.objs[key] = t
	}
	o.waiters = slices.DeleteFunc(o.waiters, func(w *waiter[T]) bool {
		if w.key != "" && w.key != key {
			return false
		}
		if !o.holds(w) {
			return false
		}
		w.ch <- at
		return true
	})
}

// holds evaluates w under o.mu.
func (o *observer[T]) holds(w *waiter[T]) bool {
	if w.key == "" {
		return w.all(o.objs)
	}
	obj, ok := o.objs[w.key]
	return ok && w.one(obj)
}

func (o *observer[T]) register(w *waiter[T]) <-chan time.Time {
	w.ch = make(chan time.Time, 1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.holds(w) {
		// Already true: the caller registered too late to time it; say "now".
		w.ch <- time.Now()
	} else {
		o.waiters = append(o.waiters, w)
	}
	return w.ch
}

// when fires once the object key satisfies cond.
func (o *observer[T]) when(key string, cond func(T) bool) <-chan time.Time {
	return o.register(&waiter[T]{key: key, one: cond})
}

// whenAll fires once all observed objects together satisfy cond.
func (o *observer[T]) whenAll(cond func(map[string]T) bool) <-chan time.Time {
	return o.register(&waiter[T]{all: cond})
}

// ---- the controller process ----

type process struct {
	name    string
	cmd     *exec.Cmd
	log     string
	started time.Time
	done    chan struct{}
}

func startController(b *testing.B, c controllerUnderTest, bin, kubeconfig, syncPeriod string) *process {
	b.Helper()
	args, err := c.args(kubeconfig, syncPeriod)
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.CreateTemp(b.TempDir(), c.name+"-*.log")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Never outlive the benchmark, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &process{name: c.name, cmd: cmd, log: f.Name(), done: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		b.Fatalf("starting %s: %v", c.name, err)
	}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	b.Cleanup(func() {
		p.kill()
		if b.Failed() {
			b.Logf("--- last lines of the %s log (%s) ---\n%s", p.name, p.log, p.tail(40))
		}
	})
	return p
}

// await waits for ch, failing the benchmark when the process exits or timeout passes first.
func (p *process) await(b *testing.B, ch <-chan time.Time, timeout time.Duration, what string) time.Time {
	b.Helper()
	select {
	case at := <-ch:
		return at
	case <-p.done:
		b.Fatalf("%s exited (%v) while waiting for %s", p.name, p.cmd.ProcessState, what)
	case <-time.After(timeout):
		b.Fatalf("%s: no %s within %s", p.name, what, timeout)
	}
	return time.Time{}
}

// stop sends SIGTERM and waits for a graceful exit.
func (p *process) stop(b *testing.B) {
	b.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.kill()
		b.Errorf("%s did not exit within %s of SIGTERM", p.name, stopTimeout)
	}
}

func (p *process) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) tail(n int) string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// memory returns VmRSS and VmHWM (peak RSS) in bytes, failing b if it cannot read them.
func (p *process) memory(b *testing.B) (rss, hwm int64) {
	b.Helper()
	rss, hwm, err := p.readMemory()
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	return rss, hwm
}

func (p *process) readMemory() (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		field, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (field != "VmRSS" && field != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parsing %s %q: %w", field, value, err)
		}
		if field == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, errors.New("no VmRSS in /proc/<pid>/status")
	}
	return rss, hwm, sc.Err()
}

// anonRSS returns RssAnon: heap, stacks and runtime memory, without the file-backed pages of
// the executable that VmRSS also counts (clean, shared, and dropped first under pressure).
func (p *process) anonRSS(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("%s: parsing RssAnon %q: %v", p.name, v, err)
			}
			return kb << 10
		}
	}
	b.Fatalf("%s: no RssAnon in /proc/<pid>/status", p.name)
	return 0
}

// cpu returns the user + system CPU time the process has used so far.
func (p *process) cpu(b *testing.B) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	// The command name may hold spaces; fields are counted from the ")" that ends it.
	// After it come state (3), ..., utime (14) and stime (15).
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	fields := strings.Fields(rest)
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatalf("%s: parsing /proc/<pid>/stat: %v", p.name, err)
	}
	// Linux reports these in USER_HZ, which is 100 on every architecture Go supports.
	return time.Duration(utime+stime) * (time.Second / 100)
}

// sampleRSS keeps the largest VmRSS seen in *peak until the returned stop is called. A
// failed read is skipped: the process dying is reported by whoever waits on it.
func (p *process) sampleRSS(peak *int64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	sample := func() {
		if rss, _, err := p.readMemory(); err == nil && rss > *peak {
			*peak = rss
		}
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-p.done:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		sample()
	}
}

// ---- reporting helpers ----

// percentile returns the nearest-rank p-th percentile.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func nonNegative(d time.Duration) time.Duration { return max(0, d) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
func mib(n int64) string        { return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20)) }
