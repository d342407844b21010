package takeover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

// gauge reads a metric of reg without labels; ok is false when reg has none of that name.
func gauge(t *testing.T, reg *prometheus.Registry, name string) (v float64, ok bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// The Gate's metrics through a take-over and the trap (a kube-controller-manager manifest
// restored with the controller on), on a fake clientset: kcm_runs_controllers says what KCM's
// Pods run once a term named the controllers, proven follows the proof, and the lapse is
// counted once.
// Over 80 lines: one Gate followed in order through wait, take-over, lapse and an unreadable Pod.
func TestGateMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := time.Now().Add(-time.Minute)
	pod := kcmPod("cp-1", started) // no --controllers: KCM runs every controller
	client := fake.NewClientset(pod, kcmLeaseHeld("cp-1_4a1b", time.Now()))
	reg := prometheus.NewRegistry()
	g, err := New(client, Options{Namespace: "kube-system", PodSelector: "component=kube-controller-manager", LeaseName: "kube-controller-manager"},
		10*time.Millisecond, reg)
	if err != nil {
		t.Fatal(err)
	}
	g.recheck = 10 * time.Millisecond
	g.Start(ctx)
	expect := func(what string, want map[string]float64) {
		t.Helper()
		var got map[string]float64
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got = map[string]float64{}
			for name := range want {
				got[name], _ = gauge(t, reg, name)
			}
			for name, v := range want {
				if got[name] != v {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("%s: metrics %v, want %v", what, got, want)
		}
	}
	const (
		runs   = "kcm_split_takeover_kcm_runs_controllers"
		proven = "kcm_split_takeover_proven"
		lapses = "kcm_split_takeover_lapses_total"
	)
	// No term yet: which controllers to look for is not known.
	expect("before a term", map[string]float64{runs: -1, proven: 0, lapses: 0})

	running := make(chan struct{}, 2)
	ended := make(chan error, 1)
	go func() {
		ended <- g.Run(ctx, []string{"endpoints-controller"}, func(ctx context.Context) error {
			running <- struct{}{}
			<-ctx.Done()
			return nil
		})
	}()
	expect("waiting while KCM runs the controller", map[string]float64{runs: 1, proven: 0, lapses: 0})

	setArgs := func(args ...string) {
		t.Helper()
		p := kcmPod("cp-1", started, args...)
		if _, err := client.CoreV1().Pods("kube-system").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The operator turns it off; the Lease was renewed by this Pod's process.
	setArgs("--controllers=*,-endpoint")
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the controllers did not start on proof")
	}
	expect("taken over", map[string]float64{runs: 0, proven: 1, lapses: 0})

	// The trap: the manifest is rendered again with the controller on.
	setArgs("--controllers=*")
	select {
	case err := <-ended:
		if !errors.Is(err, ErrProofLapsed) {
			t.Fatalf("Run returned %v, want ErrProofLapsed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the term did not end when KCM's Pod turned the controller on")
	}
	if g.AllowWrite() {
		t.Error("writes allowed after the lapse")
	}
	expect("lapsed, KCM runs it again", map[string]float64{runs: 1, proven: 0, lapses: 1})

	// Flags it cannot read: unknown, not "off".
	setArgs("--controllers=$(CONTROLLERS)")
	expect("unreadable flags", map[string]float64{runs: -1, proven: 0, lapses: 1})
}
