package leader

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func TestValidate(t *testing.T) {
	ok := Config{Enabled: true, Namespace: "kube-system", Name: "x", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		flag string
	}{
		{"renew equals lease", func(c *Config) { c.RenewDeadline = c.LeaseDuration }, "--leader-elect-renew-deadline"},
		{"renew above lease", func(c *Config) { c.RenewDeadline = 20 * time.Second }, "--leader-elect-renew-deadline"},
		{"zero lease", func(c *Config) { c.LeaseDuration = 0 }, "--leader-elect-lease-duration"},
		{"retry too long", func(c *Config) { c.RetryPeriod = 9 * time.Second }, "--leader-elect-retry-period"},
		{"empty name", func(c *Config) { c.Name = "" }, "--leader-elect-resource-name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("err = %v, want one naming %s", err, tc.flag)
			}
		})
	}
	disabled := Config{Enabled: false}
	if err := disabled.Validate(); err != nil {
		t.Fatalf("disabled election validated timings: %v", err)
	}
}

func fastConfig(name, identity string) Config {
	return Config{Enabled: true, Namespace: "kube-system", Name: name, Identity: identity,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
}

// heldConfig is fastConfig with a Lease no stall of a busy machine lets lapse (renewals would
// have to fail for 8 s): for tests in which nobody may take the Lease while its holder runs.
// Their hand-overs are releases, which do not wait for the Lease to expire.
func heldConfig(name, identity string) Config {
	cfg := fastConfig(name, identity)
	cfg.LeaseDuration, cfg.RenewDeadline = 10*time.Second, 8*time.Second
	return cfg
}

type candidate struct {
	e       *Elector
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	result  chan error
	leading chan struct{}
}

func startCandidate(t *testing.T, cfg Config) *candidate {
	t.Helper()
	reg := prometheus.NewRegistry()
	e, err := New(cfg, env.Client(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{e: e, reg: reg, cancel: cancel, result: make(chan error, 1), leading: make(chan struct{})}
	go func() {
		c.result <- e.Run(ctx, func(ctx context.Context) error {
			close(c.leading)
			<-ctx.Done()
			return nil
		})
	}()
	t.Cleanup(cancel)
	return c
}

func waitLeading(t *testing.T, c *candidate, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-c.leading:
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("%s did not lead within %s", c.e.Identity(), within)
		return 0
	}
}

func TestHandoverOnRelease(t *testing.T) {
	testenv.Require(t, env)
	cfg := heldConfig("handover", "a")
	a := startCandidate(t, cfg)
	waitLeading(t, a, 10*time.Second)
	b := startCandidate(t, heldConfig("handover", "b"))
	// b must stay standby while a holds the Lease.
	select {
	case <-b.leading:
		t.Fatal("two leaders at once")
	case <-time.After(time.Second):
	}
	if got := testutil.ToFloat64(b.e.status); got != 0 {
		t.Fatalf("standby leader_election_master_status = %v", got)
	}
	if got := testutil.ToFloat64(a.e.status); got != 1 {
		t.Fatalf("leader leader_election_master_status = %v", got)
	}

	renewed := env.LeaseHolder(t, "kube-system", "handover")
	if renewed.Holder != "a" {
		t.Fatalf("holder = %q, want a", renewed.Holder)
	}
	a.cancel()
	if err := <-a.result; err != nil {
		t.Fatalf("graceful stop returned %v", err)
	}
	// Long enough for b to wait the Lease out, so that a missing release fails below.
	took := waitLeading(t, b, cfg.LeaseDuration+20*time.Second)
	lease := env.LeaseHolder(t, "kube-system", "handover")
	if lease.Holder != "b" {
		t.Fatalf("holder = %q, want b", lease.Holder)
	}
	t.Logf("b led %s after a returned; acquired %s after a renewal of a's read before the stop",
		took.Round(time.Millisecond), lease.AcquireTime.Sub(renewed.RenewTime).Round(time.Millisecond))
	// Released, b needs no expiry. Unreleased, the Lease expires a lease duration after a's
	// last renewal (that one or later), and b's acquireTime, stamped before the read that finds
	// it expired, is earlier by that read at most (its timeout: half the renew deadline). Both
	// are this process's clock.
	if bound := cfg.LeaseDuration - cfg.RenewDeadline/2; !lease.AcquireTime.Before(renewed.RenewTime.Add(bound)) {
		t.Errorf("b acquired the Lease %s after a's renewal at %s (a lease duration %s, less the read's timeout, is %s): it waited for expiry, not for the release",
			lease.AcquireTime.Sub(renewed.RenewTime).Round(time.Millisecond), renewed.RenewTime.Format(time.RFC3339Nano), cfg.LeaseDuration, bound)
	}
}

// TestReleaseIsNoticedAtOnce uses a retry period far longer than the allowed handover time:
// a standby relying on its retry tick alone (client-go's behaviour) could not make it.
func TestReleaseIsNoticedAtOnce(t *testing.T) {
	testenv.Require(t, env)
	slow := func(id string) Config {
		return Config{Enabled: true, Namespace: "kube-system", Name: "slow-retry", Identity: id,
			LeaseDuration: 60 * time.Second, RenewDeadline: 40 * time.Second, RetryPeriod: 10 * time.Second}
	}
	a := startCandidate(t, slow("a"))
	waitLeading(t, a, 10*time.Second)
	started := time.Now()
	b := startCandidate(t, slow("b"))
	// Let b make its first attempt and settle into waiting.
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	a.cancel()
	if err := <-a.result; err != nil {
		t.Fatalf("graceful stop returned %v", err)
	}
	// Long enough for b's retry tick (up to 2.2 retry periods), so that missing it fails below.
	waitLeading(t, b, 30*time.Second)
	t.Logf("handover after release took %s with a 10s retry period", time.Since(start).Round(time.Millisecond))
	// b tried at once when started; on its retry tick alone it would try again a retry period
	// later at the soonest. Before that, it noticed the release. Both are this process's clock.
	acquired := env.LeaseHolder(t, "kube-system", "slow-retry").AcquireTime
	if !acquired.Before(started.Add(slow("b").RetryPeriod)) {
		t.Errorf("b acquired the released Lease %s after it started, not before its next retry (%s)",
			acquired.Sub(started).Round(time.Millisecond), slow("b").RetryPeriod)
	}
	b.cancel()
	if err := <-b.result; err != nil {
		t.Fatalf("b: %v", err)
	}
}

// TestStolenLeaseEndsTheTermAndIsNotReleased: another process takes the Lease (as after a
// partition). The leader must stop its controller and fence its writes at once (the watch
// shows the new holder), stand by without exiting, and never clear the new holder's Lease.
// Over 80 lines: one story on one Lease (lead, stolen, stand by, lead again), in the order it happens.
func TestStolenLeaseEndsTheTermAndIsNotReleased(t *testing.T) {
	testenv.Require(t, env)
	cfg := fastConfig("stolen", "a")
	e, err := New(cfg, env.Client(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading, stopped := make(chan struct{}, 2), make(chan struct{}, 2)
	result := make(chan error, 1)
	go func() {
		result <- e.Run(ctx, func(ctx context.Context) error {
			leading <- struct{}{}
			<-ctx.Done()
			stopped <- struct{}{}
			return nil
		})
	}()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("a never led")
	}

	client := env.Client(t)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "stolen", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		thief := "thief"
		lease.Spec.HolderIdentity = &thief
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.RenewTime = &now
		lease.Spec.AcquireTime = &now
		transitions := *lease.Spec.LeaseTransitions + 1
		lease.Spec.LeaseTransitions = &transitions
		_, err = client.CoordinationV1().Leases("kube-system").Update(ctx, lease, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The thief renews for 2 lease durations; a must stay a standby throughout.
	renewThief := func() {
		lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "stolen", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := *lease.Spec.HolderIdentity; h != "thief" {
			t.Fatalf("Lease holder = %q, want the thief's holding left alone", h)
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.RenewTime = &now
		if _, err := client.CoordinationV1().Leases("kube-system").Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-stopped:
	case err := <-result:
		t.Fatalf("Run returned %v: losing the Lease must not end the process", err)
	case <-time.After(10 * time.Second):
		t.Fatal("leader kept running after its Lease was taken")
	}
	if err := e.AllowWrite(); !IsFenced(err) {
		t.Fatalf("AllowWrite after the Lease was taken = %v, want a FencedError", err)
	}
	for range 2 * int(cfg.LeaseDuration/cfg.RetryPeriod) {
		renewThief()
		select {
		case <-leading:
			t.Fatal("a led again while the thief held a valid Lease")
		case err := <-result:
			t.Fatalf("Run returned %v", err)
		case <-time.After(cfg.RetryPeriod):
		}
	}
	if e.IsLeader() {
		t.Fatal("IsLeader still true after loss")
	}
	if got := testutil.ToFloat64(e.fenced.WithLabelValues(reasonNotLeading)); got < 1 {
		t.Fatalf("fenced writes (not_leading) = %v, want at least the refused one", got)
	}
}

func TestDisabledRunsWithoutLease(t *testing.T) {
	e, err := New(Config{Enabled: false, Name: "off"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := e.Run(context.Background(), func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Run = %v, ran = %v", err, ran)
	}
}

func TestLeadErrorIsReturnedAndLeaseReleased(t *testing.T) {
	testenv.Require(t, env)
	e, err := New(fastConfig("failing", "a"), env.Client(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("caches never synced")
	if err := e.Run(context.Background(), func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want %v", err, boom)
	}
	lease, err := env.Client(t).CoordinationV1().Leases("kube-system").Get(context.Background(), "failing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		t.Fatalf("Lease still held by %q after lead failed", *lease.Spec.HolderIdentity)
	}
}
