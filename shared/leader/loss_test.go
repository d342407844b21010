package leader

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

func TestLossReturnsAtOnceAndNeverReleases(t *testing.T) {
	e, client, lead, _, result, cut := startStubborn(t, lossConfig())
	cut.Store(true)
	select {
	case err := <-result:
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Run = %v, want ErrLeaseLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after renewals failed")
	}
	// The controller is still running (it ignores cancellation): Run must not have waited for
	// it, and must not have released the Lease to a standby while it runs.
	if !lead.running.Load() {
		t.Fatal("test is broken: the stubborn controller stopped")
	}
	if h := holder(t, client); h != "a" {
		t.Fatalf("Lease holder after loss = %q, want it left as %q to expire", h, "a")
	}
	// The watchdog is wired to the election: past lease duration + its timeout without a
	// renewal, /healthz fails.
	time.Sleep(e.cfg.LeaseDuration + 500*time.Millisecond)
	if err := e.Check(nil); err == nil {
		t.Fatal("watchdog passes although the Lease has not been renewed for longer than its duration")
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
