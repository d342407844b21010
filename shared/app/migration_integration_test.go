package app

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/migration"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Timings of every party, main and migration Leases alike: short, so hand-overs take seconds.
const (
	migLeaseDuration = 3 * time.Second
	migRenewDeadline = 2 * time.Second
	migRetryPeriod   = 500 * time.Millisecond
)

// Timings of a party that hands over by releasing, never by letting its Lease expire: a long
// Lease costs no time, and renewals stalled for seconds on a busy machine (they run in this
// process, under -race) do not let a waiting party take it in a window where none may.
const (
	migHoldDuration      = 8 * time.Second
	migHoldRenewDeadline = 6 * time.Second
	// migHoldWindow is how long the test checks such a Lease stays held: past its duration,
	// so a party that did not see the renewals would have taken it.
	migHoldWindow = migHoldDuration + 4*migRetryPeriod
)

// migHoldFlags are a member's flags for the hold timings (after the defaults, they win).
func migHoldFlags() []string {
	return []string{"--leader-elect-lease-duration=" + migHoldDuration.String(), "--leader-elect-renew-deadline=" + migHoldRenewDeadline.String()}
}

// fakeKCM plays kube-controller-manager with Leader Migration on: a client-go elector on the
// migration Lease; it believes it owns the migrated controllers from OnStartedLeading until
// it is stopped (it stops them before client-go releases the Lease).
type fakeKCM struct {
	identity string
	owns     atomic.Bool
	cancel   context.CancelFunc
	done     chan struct{}
}

// release says whether it releases the Lease when stopped (the alpha gate
// ControllerManagerReleaseLeaderElectionLockOnExit) or leaves it to expire (the default).
func startKCM(t *testing.T, client kubernetes.Interface, ns string, release bool) *fakeKCM {
	t.Helper()
	return startElector(t, client, ns, migration.DefaultLeaderName, "kcm-host_"+string(uuid.NewUUID()), release)
}

// startElector runs a client-go elector on Lease ns/lease as identity: with the hold timings
// when it releases the Lease, the short ones when it leaves it to expire.
func startElector(t *testing.T, client kubernetes.Interface, ns, lease, identity string, release bool) *fakeKCM {
	t.Helper()
	k := &fakeKCM{identity: identity, done: make(chan struct{})}
	duration, renewDeadline := migLeaseDuration, migRenewDeadline
	if release {
		duration, renewDeadline = migHoldDuration, migHoldRenewDeadline
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: lease},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: k.identity},
		},
		LeaseDuration: duration, RenewDeadline: renewDeadline, RetryPeriod: migRetryPeriod,
		ReleaseOnCancel: release,
		Name:            "fake-kcm",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				k.owns.Store(true)
				<-ctx.Done()
				k.owns.Store(false)
			},
			OnStoppedLeading: func() { k.owns.Store(false) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A logger of its own: client-go's default is klog's global one, which each in-process
	// binary replaces at start.
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	k.cancel = func() {
		// Stop the controllers first, then let client-go release the Lease, as KCM with
		// ControllerManagerReleaseLeaderElectionLockOnExit does at best.
		k.owns.Store(false)
		cancel()
	}
	go func() { defer close(k.done); le.Run(ctx) }()
	t.Cleanup(k.stop)
	return k
}

func (k *fakeKCM) stop() {
	k.cancel()
	<-k.done
}

// groupMember is one kcm-split binary in-process, running one controller.
type groupMember struct {
	name    string
	base    string
	running atomic.Bool
	starts  atomic.Int32
	rt      atomic.Pointer[Runtime]
	cancel  context.CancelFunc
	code    chan int
	exited  chan struct{}
	stderr  bytes.Buffer
}

// startMember runs a binary with one controller, its own Lease in ns and extra flags.
func startMember(t *testing.T, ns, controller string, extra ...string) *groupMember {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	m := &groupMember{name: controller, base: fmt.Sprintf("http://127.0.0.1:%d", port), code: make(chan int, 1), exited: make(chan struct{})}
	spec := testSpec(func(ctx context.Context, rt *Runtime) error {
		return rt.RunControllers(ctx, []Controller{{Name: controller, HasSynced: func() bool { return true },
			Run: func(ctx context.Context) error {
				m.rt.Store(rt)
				m.running.Store(true)
				m.starts.Add(1)
				<-ctx.Done()
				m.running.Store(false)
				return nil
			}}})
	})
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.exited)
		m.code <- Run(ctx, spec, append([]string{"test-controller",
			"--kubeconfig=" + env.Kubeconfig,
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
			"--leader-elect-resource-namespace=" + ns,
			"--leader-elect-resource-name=" + controller,
			"--leader-elect-lease-duration=" + migLeaseDuration.String(),
			"--leader-elect-renew-deadline=" + migRenewDeadline.String(),
			"--leader-elect-retry-period=" + migRetryPeriod.String(),
			"--log-level=error",
		}, extra...), &m.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-m.exited:
		case <-time.After(30 * time.Second):
		}
	})
	return m
}

// mayWrite reports whether the member's controller runs and the fence would let its writes
// through for the membership: what "owns the migrated controllers" means for a binary. A
// controller goroutine may still be returning after that; its writes are refused.
func (m *groupMember) mayWrite() bool {
	rt := m.rt.Load()
	return m.running.Load() && rt != nil && rt.migration.member.Fresh()
}

// phaseCheck reads the /readyz?verbose check whose name starts with prefix, which must pass,
// and returns the rest of its name.
func (m *groupMember) phaseCheck(prefix string) string {
	code, body, err := httpGet(m.base + "/readyz?verbose")
	if err != nil || code != http.StatusOK {
		return fmt.Sprintf("readyz %d %v", code, err)
	}
	for line := range strings.SplitSeq(body, "\n") {
		if p, ok := strings.CutPrefix(line, "[+]"+prefix); ok {
			return strings.TrimSuffix(p, " ok")
		}
	}
	return "none"
}

// phase reads the Leader Migration phase from /readyz?verbose, which must pass.
func (m *groupMember) phase() string { return m.phaseCheck("leaderMigration-") }

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// TestLeaderMigrationHandOver runs three kcm-split binaries (and one whose controller stays
// with kube-controller-manager) against a client-go elector playing kube-controller-manager
// on the same migration Lease, and samples throughout that KCM and a member never both own
// the migrated controllers (KCM: leading; a member: running with writes let through): KCM
// holds it first, the group takes it when KCM stops, KCM waits while the group holds it, and
// takes it back on a hand-back. Samples where a member's controller was still returning, its
// writes already refused, while KCM led are counted and printed.
// Over 80 lines: one sampler watches every phase, so the phases run in order in one function.
func TestLeaderMigrationHandOver(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	ns := env.Namespace(t)
	config := filepath.Join(t.TempDir(), "migration.yaml")
	if err := os.WriteFile(config, []byte(`apiVersion: controllermanager.config.k8s.io/v1
kind: LeaderMigrationConfiguration
leaderName: `+migration.DefaultLeaderName+`
controllerLeaders:
- {name: a-controller, component: kcm-split}
- {name: b-controller, component: kcm-split}
- {name: c-controller, component: "*"}
- {name: d-controller, component: kube-controller-manager}
`), 0o600); err != nil {
		t.Fatal(err)
	}

	kcm := startKCM(t, client, ns, true)
	waitFor(t, "KCM to lead", 20*time.Second, kcm.owns.Load)

	// The invariant, sampled for the whole run.
	var members []*groupMember
	kcms := []*fakeKCM{kcm}
	var mu sync.Mutex
	var violations, draining atomic.Int32
	var first atomic.Value
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(2 * time.Millisecond):
			}
			mu.Lock()
			ks := append([]*fakeKCM(nil), kcms...)
			ms := append([]*groupMember(nil), members...)
			mu.Unlock()
			for _, k := range ks {
				if !k.owns.Load() {
					continue
				}
				for _, m := range ms {
					switch {
					case m.mayWrite() && k.owns.Load():
						if violations.Add(1) == 1 {
							first.Store(fmt.Sprintf("%s may write while KCM %s owns", m.name, k.identity))
						}
					case m.running.Load() && k.owns.Load():
						draining.Add(1)
					}
				}
			}
		}
	}()
	setKCM := func(k *fakeKCM) { mu.Lock(); kcms = append(kcms, k); mu.Unlock() }

	mu.Lock()
	for i, c := range []string{"a-controller", "b-controller", "c-controller", "d-controller"} {
		// The group hands the migration Lease back by releasing it: the hold timings.
		m := startMember(t, ns, c, append(migHoldFlags(), "--enable-leader-migration", "--leader-migration-config="+config)...)
		members = append(members, m)
		if i == 0 {
			// The first one routes klog, a process-wide setting, once: the others start after.
			waitFor(t, "the first binary to serve", 20*time.Second, func() bool { code, _, _ := httpGet(m.base + "/readyz"); return code != 0 })
		}
	}
	mu.Unlock()
	a, b, c, d := members[0], members[1], members[2], members[3]
	waitFor(t, "a, b and c waiting, d standby", 30*time.Second, func() bool {
		return a.phase() == "waiting" && b.phase() == "waiting" && c.phase() == "waiting" && d.phase() == "standby"
	})
	// Longer than KCM's Lease while KCM renews it: nobody joins.
	time.Sleep(migHoldWindow)
	for _, m := range []*groupMember{a, b, c} {
		if p := m.phase(); p != "waiting" || m.starts.Load() != 0 {
			t.Fatalf("%s: phase %s, started %d times while KCM holds the Lease", m.name, p, m.starts.Load())
		}
	}

	// KCM stops (released on exit): the group takes over.
	stopped := time.Now()
	kcm.stop()
	waitFor(t, "a, b and c to run", 30*time.Second, func() bool { return a.running.Load() && b.running.Load() && c.running.Load() })
	t.Logf("hand-over KCM -> kcm-split (KCM released): %s", time.Since(stopped).Round(time.Millisecond))
	waitFor(t, "a, b and c active", 10*time.Second, func() bool {
		return a.phase() == "active" && b.phase() == "active" && c.phase() == "active" && d.phase() == "standby"
	})
	if d.starts.Load() != 0 {
		t.Errorf("d-controller, unowned, started %d times", d.starts.Load())
	}
	_, metrics, err := httpGet(a.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`kcm_split_leader_migration_phase{phase="active"} 1`, `kcm_split_leader_migration_phase{phase="waiting"} 0`,
		`kcm_split_leader_fenced_writes_total{name="a-controller",reason="migration_not_member"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	lease := env.LeaseHolder(t, ns, migration.DefaultLeaderName)
	if lease.Holder != migration.Component || lease.Duration != migHoldDuration {
		t.Fatalf("migration Lease holder %q for %s, want %q for the members' %s", lease.Holder, lease.Duration, migration.Component, migHoldDuration)
	}

	// KCM comes back: it waits, the group keeps the Lease (the members' hold timings). (A member
	// whose renewals stall on a busy machine goes stale and joins again: the group, not each
	// member, keeps it.) This KCM leaves its Lease to expire when stopped: short timings.
	kcm2 := startKCM(t, client, ns, false)
	setKCM(kcm2)
	time.Sleep(migHoldWindow)
	if kcm2.owns.Load() {
		t.Fatal("KCM took the Lease while the group held it")
	}
	waitFor(t, "a, b and c to run while KCM waits", 30*time.Second, func() bool { return a.running.Load() && b.running.Load() && c.running.Load() })
	if kcm2.owns.Load() {
		t.Fatal("KCM took the Lease while the group held it")
	}

	// Hand-back: every member stops and leaves, the last releases, KCM takes over.
	annotate := func(value *string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, migration.AnnotationHandBack)
		if value != nil {
			patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, migration.AnnotationHandBack, *value)
		}
		if _, err := client.CoordinationV1().Leases(ns).Patch(context.Background(), migration.DefaultLeaderName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	yes := "true"
	handBack := time.Now()
	annotate(&yes)
	waitFor(t, "KCM to take the Lease back", 30*time.Second, kcm2.owns.Load)
	t.Logf("hand-back kcm-split -> KCM: %s", time.Since(handBack).Round(time.Millisecond))
	waitFor(t, "a, b and c handing back", 10*time.Second, func() bool {
		return a.phase() == "handing-back" && b.phase() == "handing-back" && c.phase() == "handing-back"
	})
	if a.running.Load() || b.running.Load() || c.running.Load() {
		t.Fatal("a member runs after the hand-back")
	}
	// The annotation removed, the members wait for KCM again.
	annotate(nil)
	waitFor(t, "a, b and c waiting again", 20*time.Second, func() bool {
		return a.phase() == "waiting" && b.phase() == "waiting" && c.phase() == "waiting"
	})

	// KCM stops again, without releasing: the members, which went back to waiting in-process,
	// take over once the Lease has expired by their observation.
	stopped = time.Now()
	kcm2.stop()
	waitFor(t, "a, b and c to run again", 30*time.Second, func() bool { return a.running.Load() && b.running.Load() && c.running.Load() })
	t.Logf("hand-over KCM -> kcm-split (KCM's Lease expired, duration %s): %s", migLeaseDuration, time.Since(stopped).Round(time.Millisecond))

	// Graceful shutdown: the last one out releases the Lease.
	for _, m := range []*groupMember{a, b, c, d} {
		m.cancel()
		select {
		case code := <-m.code:
			if code != ExitOK {
				t.Errorf("%s exited %d: %s", m.name, code, m.stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit", m.name)
		}
	}
	if got := env.LeaseHolder(t, ns, migration.DefaultLeaderName); got.Holder != "" {
		l, err := client.CoordinationV1().Leases(ns).Get(context.Background(), migration.DefaultLeaderName, metav1.GetOptions{})
		t.Errorf("migration Lease held by %q after every member left: %v %v", got.Holder, l, err)
	}
	close(stopSampling)
	<-sampled
	t.Logf("samples where a member's controller was returning, its writes refused, while KCM led: %d", draining.Load())
	if n := violations.Load(); n > 0 {
		t.Fatalf("%d samples where KCM and a member both owned the controllers; first: %v", n, first.Load())
	}
}
