package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Process is a binary a test started: a control plane component or a controller under test.
type Process struct {
	Name string
	Cmd  *exec.Cmd
	// Log holds the process's stdout and stderr.
	Log    string
	done   chan struct{}
	frozen atomic.Bool
}

// StartProcess starts bin with args, logging to logPath. The process dies with the test
// binary, even when that is killed, so nothing leaks between runs.
func StartProcess(name, logPath, bin string, args ...string) (*Process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// PID is the process's ID (and, as StartProcess puts each process in a group of its own,
// its process group's ID).
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Freeze stops the process and everything it started with SIGSTOP, as a stalled node, a
// long GC pause or a paused VM would: it keeps its sockets, Lease and caches but makes no
// progress at all (no renewals, no writes, no reads of its watches) until Thaw. Freeze
// returns once every thread of the process is stopped.
func (p *Process) Freeze() error {
	if p.Exited() {
		return fmt.Errorf("freezing %s: it has exited", p.Name)
	}
	p.frozen.Store(true)
	if err := syscall.Kill(-p.PID(), syscall.SIGSTOP); err != nil {
		return fmt.Errorf("freezing %s: %w", p.Name, err)
	}
	// SIGSTOP is delivered asynchronously; a thread still running could write once more.
	return wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("freezing %s: it exited", p.Name)
		}
		return allThreadsStopped(p.PID()), nil
	})
}

// Thaw resumes a process Freeze stopped (SIGCONT). Timers that fired meanwhile fire at once:
// a frozen leader finds its Lease renewal overdue, exactly as after a real stall.
func (p *Process) Thaw() error {
	p.frozen.Store(false)
	if p.Exited() {
		return nil
	}
	if err := syscall.Kill(-p.PID(), syscall.SIGCONT); err != nil {
		return fmt.Errorf("thawing %s: %w", p.Name, err)
	}
	return nil
}

// allThreadsStopped reports whether every thread of pid is in state T (stopped by a signal)
// or t (stopped by a tracer), per /proc/<pid>/task/*/stat.
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses and may hold any byte.
		end := strings.LastIndexByte(string(stat), ')')
		if end < 0 || end+2 >= len(stat) || (stat[end+2] != 'T' && stat[end+2] != 't') {
			return false
		}
	}
	return true
}

// Stop sends SIGTERM and waits up to timeout for the exit, then kills. It reports whether the
// process exited on SIGTERM alone. A frozen process is thawed after the SIGTERM, so that it
// handles the signal as a running one would.
func (p *Process) Stop(timeout time.Duration) bool {
	if p == nil || p.Cmd.Process == nil || p.Exited() {
		return true
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if p.frozen.Load() {
		_ = p.Thaw()
	}
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		_ = p.Cmd.Process.Kill()
		<-p.done
		return false
	}
}

// Kill sends SIGKILL and waits for the exit.
func (p *Process) Kill() {
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// ExitCode is the exit status once the process has exited, -1 before or when killed.
func (p *Process) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Tail returns the last n lines of the log, for failure messages.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Controller is a kcm-split controller binary under test, with its metrics and health server
// on a free loopback port.
type Controller struct {
	*Process
	// URL is the base of /metrics, /healthz and /readyz.
	URL string
	t   testing.TB
}

// StartController runs the controller binary bin against env with args added after
// --kubeconfig, --secure-port=0, --metrics-bind-address (plain HTTP on a free loopback port)
// and --log-level=2. It is stopped (SIGTERM) when the
// test ends, and its log is printed if the test failed.
func (env *Env) StartController(t testing.TB, bin, name string, args ...string) *Controller {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	all := append([]string{
		"--kubeconfig=" + env.Kubeconfig,
		// Tests scrape plain HTTP on a free port; the secure port (a fixed default per binary)
		// would collide between two replicas. args may turn it back on: the last value wins.
		"--secure-port=0",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
		"--log-level=2",
	}, args...)
	p, err := StartProcess(name, filepath.Join(t.TempDir(), name+".log"), bin, all...)
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{Process: p, URL: fmt.Sprintf("http://127.0.0.1:%d", port), t: t}
	t.Cleanup(func() {
		if !c.Stop(30 * time.Second) {
			t.Errorf("%s did not exit within 30s of SIGTERM", name)
		}
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", name, c.Tail(40))
		}
	})
	return c
}

// Get fetches path from the controller's server; code 0 means it did not answer.
func (c *Controller) Get(path string) (code int, body string) {
	resp, err := http.Get(c.URL + path)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Metric returns the value of the sample named exactly series (name and labels as exposed,
// e.g. `workqueue_adds_total{name="endpoint"}`), or -1 when absent.
func (c *Controller) Metric(series string) float64 {
	_, body := c.Get("/metrics")
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// QueuesIdle reports whether each named workqueue of the controller is empty with no item in
// flight (upstream's workqueue_depth and workqueue_unfinished_work_seconds, both 0).
func (c *Controller) QueuesIdle(queues ...string) bool {
	for _, q := range queues {
		l := `{name="` + q + `"}`
		if c.Metric(`workqueue_depth`+l) != 0 || c.Metric(`workqueue_unfinished_work_seconds`+l) != 0 {
			return false
		}
	}
	return true
}

// WaitQueuesIdle waits up to timeout until QueuesIdle(queues...), and fails the test if they
// never are: after it, a count of writes shows that no more are coming from what was queued.
func (c *Controller) WaitQueuesIdle(timeout time.Duration, queues ...string) {
	c.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return c.QueuesIdle(queues...), nil
	})
	if err != nil {
		c.t.Fatalf("%s: queues %v never drained: %v", c.Name, queues, err)
	}
}

// IsLeader reports whether the controller holds the Lease named lease.
func (c *Controller) IsLeader(lease string) bool {
	return c.Metric(`leader_election_master_status{name="`+lease+`"}`) == 1
}

// WaitLeadingAndSynced waits until the controller holds lease and is Ready (caches synced).
func (c *Controller) WaitLeadingAndSynced(lease string, timeout time.Duration) {
	c.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if c.Exited() {
			return false, fmt.Errorf("%s exited with %d", c.Name, c.ExitCode())
		}
		// Leadership first: a standby is Ready too, and may become leader between two checks.
		if !c.IsLeader(lease) {
			return false, nil
		}
		code, _ := c.Get("/readyz")
		return code == http.StatusOK, nil
	})
	if err != nil {
		c.t.Fatalf("%s not leading %s and synced: %v", c.Name, lease, err)
	}
}

// identityRE finds the leader-election identity in the "Starting" line every kcm-split binary
// logs (shared/app), in the json log format ("identity":"x") and the console one
// ("identity": "x").
var identityRE = regexp.MustCompile(`"identity":\s*"([^"]+)"`)

// logIdentity returns the identity in the first line of log that says Starting, or "".
func logIdentity(log []byte) string {
	for line := range bytes.Lines(log) {
		if !bytes.Contains(line, []byte("Starting")) {
			continue
		}
		if m := identityRE.FindSubmatch(line); m != nil {
			return string(m[1])
		}
	}
	return ""
}

// Identity is the holder identity ("<hostname>_<uuid>") the controller writes into its Lease
// and, at the end of its user agent, into every audit event: what tells two replicas of one
// controller apart. It reads the "Starting" line of the controller's log, waiting up to 10s
// for it, and fails the test without one.
func (c *Controller) Identity() string {
	c.t.Helper()
	var id string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(c.Log)
		if err != nil {
			return false, err
		}
		id = logIdentity(b)
		return id != "" || c.Exited(), nil
	})
	if err != nil || id == "" {
		c.t.Fatalf("no leader-election identity in the log of %s (%v); last lines:\n%s", c.Name, err, c.Tail(10))
	}
	return id
}
