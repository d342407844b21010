package migration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kcm-split/kcm-split/deploy/tests/drills/handover"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// migrationLease is the migration Lease's name in both configurations (the design's default).
const migrationLease = "kcm-split-migration"

// ourLease are the leader-election flags of our binaries: takeovers in seconds.
var ourLease = []string{
	"--leader-elect-lease-duration=4s",
	"--leader-elect-renew-deadline=3s",
	"--leader-elect-retry-period=500ms",
}

// binary is one kcm-split binary of the drill, restarted as a Deployment rollout would.
type binary struct {
	alias  string
	bin    testenv.Binary
	args   []string
	starts int
	c      *testenv.Controller
}

func ourBinaries() []*binary {
	mk := func(alias, id string, args ...string) *binary {
		return &binary{alias: alias, bin: testenv.Binary{ID: id, Dir: filepath.Join("..", "..", "..", "..", "services", alias)}, args: args}
	}
	return []*binary{
		mk("endpoints", "endpoints-controller"),
		mk("nodelifecycle", "nodelifecycle-controller", nodeTiming...),
		mk("quota", "quota-controller"),
		mk("namespace", "namespace-controller"),
		mk("servicelb", "service-lb-controller"),
		mk("pvbinder", "pv-binder-controller"),
	}
}

// start runs a new process of the binary with extra flags.
func (b *binary) start(t *testing.T, extra ...string) {
	t.Helper()
	b.starts++
	args := append(append(append([]string{}, ourLease...), b.args...), extra...)
	b.c = env.Start(t, b.bin, fmt.Sprintf("%s-%d", b.bin.ID, b.starts), args...)
}

// stop stops the running process (SIGTERM; a graceful exit releases what it holds).
func (b *binary) stop(t *testing.T) {
	t.Helper()
	if b.c != nil && !b.c.Stop(30*time.Second) {
		t.Errorf("%s did not exit within 30s of SIGTERM", b.bin.ID)
	}
}

// waitLogged waits until the running process has logged a line holding text.
func (b *binary) waitLogged(t *testing.T, text string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		out, err := os.ReadFile(b.c.Log)
		return err == nil && strings.Contains(string(out), text), nil
	})
	if err != nil {
		t.Fatalf("%s never logged %q: %v", b.bin.ID, text, err)
	}
}

// inPhase reports whether the binary reports the leader-migration phase p.
func (b *binary) inPhase(p string) bool {
	return b.c.Metric(`kcm_split_leader_migration_phase{phase="`+p+`"}`) == 1
}

// waitPhase waits until the binary reports phase p and is Ready (a standby is Ready too).
func (b *binary) waitPhase(t *testing.T, p string, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if b.c.Exited() {
			return false, fmt.Errorf("%s exited with %d", b.bin.ID, b.c.ExitCode())
		}
		if !b.inPhase(p) {
			return false, nil
		}
		code, _ := b.c.Get("/readyz")
		return code == http.StatusOK, nil
	})
	if err != nil {
		_, body := b.c.Get("/readyz?verbose")
		t.Fatalf("%s never reported phase %s: %v\n/readyz?verbose:\n%s\nlog:\n%s", b.bin.ID, p, err, body, b.c.Tail(20))
	}
}

// waitTakeOver waits until the binary's --take-over-from-kcm state is state (waiting or
// active), in its metric and its /readyz check, and it is Ready (a waiting binary is too).
func (b *binary) waitTakeOver(t *testing.T, state string, timeout time.Duration) {
	t.Helper()
	want := 0.0
	if state == "active" {
		want = 1
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if b.c.Exited() {
			return false, fmt.Errorf("%s exited with %d", b.bin.ID, b.c.ExitCode())
		}
		if b.c.Metric("kcm_split_takeover_proven") != want {
			return false, nil
		}
		code, body := b.c.Get("/readyz?verbose")
		return code == http.StatusOK && strings.Contains(body, "[+]kcmTakeOver-"+state+" ok"), nil
	})
	if err != nil {
		_, body := b.c.Get("/readyz?verbose")
		t.Fatalf("%s never reported take-over state %s: %v\n/readyz?verbose:\n%s\nlog:\n%s", b.bin.ID, state, err, body, b.c.Tail(20))
	}
}

// ourWrite reports whether ev is a write by one of our binaries' controllers (not their
// leader election, which the switch point analysis reads apart).
var ourWrite = handover.KcmSplitWrites(handover.KcmSplitIDs...)

// writeMigrationConfig writes a LeaderMigrationConfiguration (v1: Leases only, no resourceLock
// field; strict decoding refuses one) giving every migrated controller
// to component, and returns its path.
func writeMigrationConfig(t *testing.T, component string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: controllermanager.config.k8s.io/v1\nkind: LeaderMigrationConfiguration\nleaderName: %s\ncontrollerLeaders:\n", migrationLease)
	for _, c := range migrated {
		fmt.Fprintf(&b, "- name: %s\n  component: %s\n", c, component)
	}
	p := filepath.Join(t.TempDir(), "migration-"+component+".yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
