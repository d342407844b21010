package servicelb_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kcm-split/kcm-split/services/servicelb"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// overwriteEvents sums the counts of the StatusOverwritten Events of Service name.
func (f *fixture) overwriteEvents(name string) (n int32, msgs []string) {
	f.t.Helper()
	evs, err := f.c.CoreV1().Events(f.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",reason=" + servicelb.ReasonStatusOverwritten})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range evs.Items {
		n += max(e.Count, 1)
		msgs = append(msgs, e.Source.Host+": "+e.Message)
	}
	return n, msgs
}

// TestOverwriteEpisodeHandoverDrill (issue 49): a second writer of a Service's status still
// at it across a handover is one overwrite episode, its backoff going on. Another load
// balancer controller puts its own address in the status each time it sees ours; leader a
// reports it once (LoadBalancerStatusOverwritten), restores with backoff and keeps the
// episode beside its Lease. a is killed with SIGKILL (no release) and b takes the Lease over
// while the other writer goes on; once b has restored the status twice, the Service still has
// one such Event. Before the episode was kept, b knew nothing it had written: its first
// restore went out at once without an Event, and the next overwrite began a new episode, a
// second Event, its backoff back at 5 s.
//
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestOverwriteEpisodeHandoverDrill(t *testing.T) {
	testenv.Require(t, env)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, c: env.Client(t), pools: v1alpha1.NewClient(dyn), ns: env.Namespace(t), block: int(blocks.Add(1))}
	ctx := context.Background()
	const lease = "servicelb-handover-overwrites"
	store := lease + servicelb.OverwritesStoreSuffix
	testenv.DeleteKeptOnCleanup(t, f.c, store)
	args := append([]string{"--leader-elect-resource-name=" + lease}, testenv.ShortLeaseFlags()...)
	f.pool("main", []string{f.v4(1) + "-" + f.v4(10)})
	a := env.Start(t, controller, "a", args...)
	a.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	f.ctrl = a
	f.service("s")
	ours := ingressIPs(f.waitAddress("s"))[0]
	// The other writer: whenever the status shows our address, it writes its own, a
	// hostname as a cloud provider's load balancer controller does. (An address in the
	// status is one a new holder takes as the Service's at its start, from a crash as from
	// a handover: it would not fight over it.)
	const theirs = "lb-0123.other-cloud.example"
	other := env.ClientAs(t, "other-lb-controller/v1.0")
	var mu sync.Mutex
	var restores []time.Time // when the other writer found our address back
	var overwrites atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			s, err := other.CoreV1().Services(f.ns).Get(ctx, "s", metav1.GetOptions{})
			if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 || s.Status.LoadBalancer.Ingress[0].IP != ours {
				continue
			}
			mu.Lock()
			restores = append(restores, time.Now())
			mu.Unlock()
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: theirs}}
			if _, err := other.CoreV1().Services(f.ns).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err == nil {
				overwrites.Add(1)
			}
		}
	})
	stopWriting := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopWriting)
	restoresSince := func(at time.Time) []time.Time {
		mu.Lock()
		defer mu.Unlock()
		var out []time.Time
		for _, r := range restores {
			if r.After(at) {
				out = append(out, r)
			}
		}
		return out
	}

	f.waitEvent("s", servicelb.ReasonStatusOverwritten)
	var kept string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := f.c.CoreV1().ConfigMaps("kube-system").Get(ctx, store, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		kept = cm.Data[servicelb.OverwritesKey]
		return strings.Contains(kept, `"key":"`+f.ns+`/s"`), nil
	})
	if err != nil {
		t.Fatalf("the episode is not kept in %s: %q", store, kept)
	}

	// The leader crashes: SIGKILL, no drain, no release of its Lease. The other writer goes on.
	killed := time.Now()
	a.Kill()
	b := env.Start(t, controller, "b", args...)
	b.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	leading := time.Now()
	t.Logf("b leads %s after a's SIGKILL; a restored %d times", leading.Sub(killed).Round(time.Millisecond), len(restoresSince(time.Time{})))
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return len(restoresSince(leading)) >= 2, nil
	})
	if err != nil {
		t.Fatalf("b restored the status %d times in 2 minutes, want 2", len(restoresSince(leading)))
	}
	stopWriting()
	// b's Event, if any, is recorded before its restore goes out.
	time.Sleep(time.Second)
	byB := restoresSince(leading)
	n, msgs := f.overwriteEvents("s")
	t.Logf("b's restores %s and %s after it leads; %d Events: %q",
		byB[0].Sub(leading).Round(time.Millisecond), byB[1].Sub(leading).Round(time.Millisecond), n, msgs)
	if n != 1 {
		t.Errorf("%d %s Events for one episode across the handover, want 1: %q", n, servicelb.ReasonStatusOverwritten, msgs)
	}
	if gap := byB[1].Sub(byB[0]); gap < 9*time.Second {
		t.Errorf("b's second restore %s after its first, want the episode's backoff (10 s or more; 5 s is a new episode's)", gap.Round(time.Millisecond))
	}
}
