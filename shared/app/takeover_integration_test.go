package app

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// publishKCMPod publishes kube-controller-manager's mirror Pod on node as the kubelet does
// when the static Pod's manifest changes (see testenv.PublishMirrorPod), its container
// running with --controllers=controllers since started.
func publishKCMPod(t *testing.T, client kubernetes.Interface, ns, node, controllers string, started time.Time) {
	t.Helper()
	ctx := context.Background()
	name := "kube-controller-manager-" + node
	cmd := []string{"kube-controller-manager", "--leader-elect=true", "--controllers=" + controllers}
	if err := testenv.PublishMirrorPod(ctx, client, ns, name, node, "kube-controller-manager", testenv.KCMPodLabels(), cmd); err != nil {
		t.Fatal(err)
	}
	if err := testenv.MirrorPodStarted(ctx, client, ns, name, started); err != nil {
		t.Fatal(err)
	}
}

// TestTakeOverFromKCM plays a kubeadm control-plane node whose kube-controller-manager static
// Pod is rolled (its mirror Pod published as the kubelet does, its process a client-go elector
// on the real Lease kube-controller-manager, with the host in its identity as KCM has), and a
// binary with --take-over-from-kcm beside it. It samples throughout that the binary's
// controller never may write while a KCM process whose flags run that controller leads: the
// binary waits while KCM runs it, takes over once the roll turned it off, stops (writes
// refused) when a Pod turns it on again, and takes over again after the next roll.
// Over 80 lines: one sampler watches every roll, so the rolls run in order in one function.
func TestTakeOverFromKCM(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	ns := env.Namespace(t)
	const node, controller = "cp-1", "a-controller"
	off, on := "*,-"+controller, "*"

	// KCM as it runs today: the controller on, leading.
	publishKCMPod(t, client, ns, node, on, time.Now())
	type kcmProc struct {
		*fakeKCM
		runs bool // its flags run the controller
	}
	var procs atomic.Pointer[[]kcmProc]
	procs.Store(&[]kcmProc{})
	startProc := func(runs, release bool) *fakeKCM {
		k := startElector(t, client, ns, "kube-controller-manager", node+"_"+string(uuid.NewUUID()), release)
		ps := append(append([]kcmProc(nil), *procs.Load()...), kcmProc{k, runs})
		procs.Store(&ps)
		return k
	}
	kcm := startProc(true, false)
	waitFor(t, "KCM to lead", 20*time.Second, kcm.owns.Load)

	m := startMember(t, ns, controller, "--take-over-from-kcm", "--kcm-namespace="+ns)
	mayWrite := func() bool {
		rt := m.rt.Load()
		return m.running.Load() && rt != nil && rt.takeOver.AllowWrite()
	}
	var violations, draining atomic.Int32
	var first atomic.Value
	stopSampling, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(2 * time.Millisecond):
			}
			for _, k := range *procs.Load() {
				if !k.runs || !k.owns.Load() {
					continue
				}
				switch {
				case mayWrite() && k.owns.Load():
					if violations.Add(1) == 1 {
						first.Store("the binary may write while KCM " + k.identity + " runs the controller")
					}
				case m.running.Load() && k.owns.Load():
					draining.Add(1)
				}
			}
		}
	}()

	waitFor(t, "the binary to wait for proof", 30*time.Second, func() bool { return m.phaseCheck("kcmTakeOver-") == "waiting" })
	time.Sleep(2 * migLeaseDuration)
	if n := m.starts.Load(); n != 0 {
		t.Fatalf("the controller started %d times while KCM runs it", n)
	}

	// The roll: the kubelet stops the process (its Lease left to expire), publishes the new
	// mirror Pod, and starts the new process, which turns the controller off.
	stopped := time.Now()
	kcm.stop()
	publishKCMPod(t, client, ns, node, off, time.Now())
	kcm = startProc(false, true)
	waitFor(t, "the binary to take over", 30*time.Second, m.running.Load)
	t.Logf("take-over after the roll (old Lease left to expire, %s): %s", migLeaseDuration, time.Since(stopped).Round(time.Millisecond))
	waitFor(t, "the take-over to show", 10*time.Second, func() bool { return m.phaseCheck("kcmTakeOver-") == "active" })
	_, metrics, err := httpGet(m.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kcm_split_takeover_proven 1", `kcm_split_leader_fenced_writes_total{name="a-controller",reason="kcm_may_run"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Someone turns the controller on again in the manifest: the new mirror Pod is published
	// before its process starts, and that is enough for the binary to stop.
	lapse := time.Now()
	publishKCMPod(t, client, ns, node, on, time.Now())
	waitFor(t, "the binary to stop", 30*time.Second, func() bool { return !m.running.Load() })
	t.Logf("stopped after a Pod turned the controller on: %s", time.Since(lapse).Round(time.Millisecond))
	if mayWrite() {
		t.Fatal("writes allowed after the proof lapsed")
	}
	kcm.stop()
	kcm = startProc(true, true)
	waitFor(t, "KCM to lead", 20*time.Second, kcm.owns.Load)
	waitFor(t, "the binary to wait again", 10*time.Second, func() bool { return m.phaseCheck("kcmTakeOver-") == "waiting" })

	// The next roll turns it off again (Lease released on exit): the binary takes over again.
	stopped = time.Now()
	kcm.stop()
	publishKCMPod(t, client, ns, node, off, time.Now())
	kcm = startProc(false, true)
	waitFor(t, "the binary to take over again", 30*time.Second, m.running.Load)
	t.Logf("take-over after the roll (old Lease released): %s", time.Since(stopped).Round(time.Millisecond))
	if n := m.starts.Load(); n != 2 {
		t.Errorf("the controller started %d times, want 2", n)
	}

	m.cancel()
	select {
	case code := <-m.code:
		if code != ExitOK {
			t.Errorf("exited %d: %s", code, m.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the binary did not exit")
	}
	close(stopSampling)
	<-sampled
	t.Logf("samples where the controller was returning, its writes refused, while a KCM running it led: %d", draining.Load())
	if n := violations.Load(); n > 0 {
		t.Fatalf("%d samples where KCM ran the controller and the binary could write; first: %v", n, first.Load())
	}
	_ = kcm
}
