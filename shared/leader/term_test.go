package leader

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// These tests cut the apiserver off from the leader with a fake clientset, which a real
// apiserver cannot do on demand: Lease updates start failing while the controller runs.

func lossConfig() Config {
	return Config{Enabled: true, Namespace: "kube-system", Name: "loss", Identity: "a",
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
		ShutdownGrace: 30 * time.Second, WatchdogTimeout: 100 * time.Millisecond}
}

type stubbornLead struct {
	leading chan struct{}
	release chan struct{}
	running atomic.Bool
}

// run ignores cancellation until released, like a controller stuck in a long sync.
func (s *stubbornLead) run(context.Context) error {
	s.running.Store(true)
	close(s.leading)
	<-s.release
	s.running.Store(false)
	return nil
}

// cutOff makes every Lease update fail from the moment it is set. The reactor is installed
// before the client is used: fake reactors must not be added concurrently with requests.
type cutOff struct{ atomic.Bool }

func startStubborn(t *testing.T, cfg Config) (*Elector, *fake.Clientset, *stubbornLead, context.CancelFunc, chan error, *cutOff) {
	t.Helper()
	client := fake.NewClientset()
	cut := &cutOff{}
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if cut.Load() {
			return true, nil, errors.New("apiserver unreachable")
		}
		return false, nil, nil
	})
	e, err := New(cfg, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	lead := &stubbornLead{leading: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-lead.release:
		default:
			close(lead.release)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	result := make(chan error, 1)
	go func() { result <- e.Run(ctx, lead.run) }()
	select {
	case <-lead.leading:
	case <-time.After(10 * time.Second):
		t.Fatal("never led")
	}
	return e, client, lead, cancel, result, cut
}

func holder(t *testing.T, client *fake.Clientset) string {
	t.Helper()
	lease, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "loss", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

func TestLossWithAWedgedControllerExitsWithoutReleasing(t *testing.T) {
	cfg := lossConfig()
	cfg.ShutdownGrace = 500 * time.Millisecond
	e, client, lead, _, result, cut := startStubborn(t, cfg)
	cut.Store(true)
	select {
	case err := <-result:
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Run = %v, want ErrLeaseLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after renewals failed and the controller ignored its cancellation")
	}
	// The controller is still running (it ignores cancellation): Run must not stand by
	// again beside it, and must not have released the Lease to a standby while it runs.
	if !lead.running.Load() {
		t.Fatal("test is broken: the stubborn controller stopped")
	}
	if h := holder(t, client); h != "a" {
		t.Fatalf("Lease holder after loss = %q, want it left as %q to expire", h, "a")
	}
	if err := e.AllowWrite(); !IsFenced(err) {
		t.Fatalf("AllowWrite after loss = %v, want a FencedError", err)
	}
	// The watchdog is wired to the election: past lease duration + its timeout without a
	// renewal, /healthz fails.
	time.Sleep(e.cfg.LeaseDuration + 500*time.Millisecond)
	if err := e.Check(nil); err == nil {
		t.Fatal("watchdog passes although the Lease has not been renewed for longer than its duration")
	}
}

// TestLossStandsByAgainAndLeadsAnew is the apiserver outage without a crash loop: renewals
// fail, the controller is stopped and its writes fenced, the process keeps running, and when
// the apiserver answers again the controller starts afresh in a second term.
func TestLossStandsByAgainAndLeadsAnew(t *testing.T) {
	client := fake.NewClientset()
	cut := &cutOff{}
	client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if cut.Load() && a.GetVerb() != "watch" && a.GetVerb() != "list" {
			return true, nil, errors.New("apiserver unreachable")
		}
		return false, nil, nil
	})
	reg := prometheus.NewRegistry()
	e, err := New(lossConfig(), client, reg)
	if err != nil {
		t.Fatal(err)
	}
	var terms atomic.Int32
	leading := make(chan int32, 4)
	stopped := make(chan int32, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan error, 1)
	go func() {
		result <- e.Run(ctx, func(ctx context.Context) error {
			n := terms.Add(1)
			leading <- n
			<-ctx.Done()
			stopped <- n
			return nil
		})
	}()
	recv := func(ch chan int32, what string) int32 {
		t.Helper()
		select {
		case n := <-ch:
			return n
		case err := <-result:
			t.Fatalf("Run returned %v while waiting for %s", err, what)
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
		return 0
	}
	recv(leading, "the first term")
	if err := e.AllowWrite(); err != nil {
		t.Fatalf("leader with a fresh Lease fenced: %v", err)
	}
	cut.Store(true)
	if n := recv(stopped, "the controller to stop after losing the Lease"); n != 1 {
		t.Fatalf("term %d stopped, want 1", n)
	}
	if err := e.AllowWrite(); !IsFenced(err) {
		t.Fatalf("AllowWrite after the loss = %v, want a FencedError", err)
	}
	if e.IsLeader() {
		t.Fatal("IsLeader after the loss")
	}
	cut.Store(false)
	if n := recv(leading, "a second term once the apiserver answers"); n != 2 {
		t.Fatalf("term %d started, want 2", n)
	}
	if err := e.AllowWrite(); err != nil {
		t.Fatalf("second term fenced: %v", err)
	}
	if got := testutil.ToFloat64(e.terms); got != 2 {
		t.Fatalf("kcm_split_leader_terms_total = %v, want 2", got)
	}
	if got := testutil.ToFloat64(e.losses); got != 1 {
		t.Fatalf("kcm_split_leader_losses_total = %v, want 1", got)
	}
	cancel()
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("graceful stop after a second term returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
}

func TestLossDuringDrainIsNotAGracefulExit(t *testing.T) {
	_, client, _, cancel, result, cut := startStubborn(t, lossConfig())
	cancel() // SIGTERM: the controller keeps draining (it ignores cancellation)
	time.Sleep(200 * time.Millisecond)
	cut.Store(true)
	select {
	case err := <-result:
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Run = %v, want ErrLeaseLost: the Lease was lost while the controller still ran", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if h := holder(t, client); h != "a" {
		t.Fatalf("Lease holder = %q, want it left as %q", h, "a")
	}
}

func TestGraceExpiryDoesNotReleaseAndFails(t *testing.T) {
	cfg := lossConfig()
	cfg.ShutdownGrace = 300 * time.Millisecond
	_, client, lead, cancel, result, _ := startStubborn(t, cfg)
	cancel()
	select {
	case err := <-result:
		if err == nil || !strings.Contains(err.Error(), "did not stop") {
			t.Fatalf("Run = %v, want an error saying the controller did not stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the grace period")
	}
	if !lead.running.Load() {
		t.Fatal("test is broken: the stubborn controller stopped")
	}
	if h := holder(t, client); h != "a" {
		t.Fatalf("Lease released to %q while the controller still runs", h)
	}
}

func TestGracefulShutdownReleasesAfterDrain(t *testing.T) {
	_, client, lead, cancel, result, _ := startStubborn(t, lossConfig())
	cancel()
	time.Sleep(300 * time.Millisecond)
	if h := holder(t, client); h != "a" {
		t.Fatalf("Lease released (holder %q) before the controller drained", h)
	}
	close(lead.release)
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
	if h := holder(t, client); h != "" {
		t.Fatalf("Lease still held by %q after a graceful stop", h)
	}
}

// On a graceful stop the fence closes once the controller has returned and before the release
// is sent: a write made while the release is in flight (a stray goroutine's) is refused.
func TestFenceClosesBeforeRelease(t *testing.T) {
	client := fake.NewClientset()
	var elector atomic.Pointer[Elector]
	var atRelease atomic.Pointer[error]
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lease, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if ok && (lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "") {
			if e := elector.Load(); e != nil {
				err := e.AllowWrite()
				atRelease.Store(&err)
			}
		}
		return false, nil, nil
	})
	e, err := New(lossConfig(), client, nil)
	if err != nil {
		t.Fatal(err)
	}
	elector.Store(e)
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	var inTerm error
	result := make(chan error, 1)
	go func() {
		result <- e.Run(ctx, func(ctx context.Context) error {
			close(leading)
			<-ctx.Done()
			inTerm = e.AllowWrite() // still draining: writes pass
			return nil
		})
	}()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("never led")
	}
	cancel()
	if err := <-result; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if inTerm != nil {
		t.Errorf("a write during the drain was refused: %v", inTerm)
	}
	got := atRelease.Load()
	if got == nil {
		t.Fatal("no release was sent")
	}
	if !IsFenced(*got) {
		t.Errorf("a write while the release was in flight: %v, want refused by the fence", *got)
	}
}
