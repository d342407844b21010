package benchkit

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParallel(t *testing.T) {
	var sum atomic.Int64
	if err := Parallel(context.Background(), 100, 7, func(_ context.Context, i int) error {
		sum.Add(int64(i))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sum.Load() != 4950 {
		t.Errorf("sum of indexes = %d, want 4950: some index ran twice or never", sum.Load())
	}

	boom := errors.New("boom")
	var ran atomic.Int64
	err := Parallel(context.Background(), 10000, 4, func(_ context.Context, i int) error {
		ran.Add(1)
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("Parallel = %v, want %v", err, boom)
	}
	if ran.Load() == 10000 {
		t.Error("Parallel went on after an error")
	}
}

func TestUpstreamArgsLetExtraOverride(t *testing.T) {
	args := UpstreamArgs("/k", "endpoints-controller", "--secure-port=10257")
	last := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		last[k] = v
	}
	if last["--secure-port"] != "10257" || last["--controllers"] != "endpoints-controller" || last["--kubeconfig"] != "/k" {
		t.Errorf("UpstreamArgs = %q", args)
	}
	if !math.IsNaN(NotMeasured) {
		t.Fatal("NotMeasured must be NaN")
	}
}

func TestSidesComposeFlags(t *testing.T) {
	ours := Ours("x-controller", "example.com/cmd/x-controller", "--a=1")
	if ours.Name != "x-controller" || ours.UserAgent != "x-controller/" || ours.Label() != "x-controller" {
		t.Errorf("Ours = %+v", ours)
	}
	first, err := ours.Args("/kc", "--b=2")
	if err != nil {
		t.Fatal(err)
	}
	second, _ := ours.Args("/kc", "--c=3")
	for _, want := range []string{"--kubeconfig=/kc", "--leader-elect=false", "--secure-port=0", "--log-level=info", "--a=1"} {
		if !slices.Contains(first, want) {
			t.Errorf("ours args %q lack %s", first, want)
		}
	}
	// Per-run flags come last (they win), and one run's never leak into the next.
	if first[len(first)-1] != "--b=2" || second[len(second)-1] != "--c=3" || slices.Contains(second, "--b=2") {
		t.Errorf("ours args: %q then %q", first, second)
	}

	up := UpstreamSide("a-controller,b-controller", "--q=1")
	args, _ := up.Args("/kc", "--z=9")
	want := []string{"--kubeconfig=/kc", "--controllers=a-controller,b-controller", "--leader-elect=false",
		"--use-service-account-credentials=false", "--secure-port=0", "--q=1", "--z=9", "--v=1"}
	if !slices.Equal(args, want) || up.UserAgent != UpstreamUserAgent {
		t.Errorf("upstream args %q, want %q", args, want)
	}
}

func TestObserverWhenAny(t *testing.T) {
	o := &Observer[*corev1.ConfigMap]{objs: map[string]*corev1.ConfigMap{}}
	cm := func(name, v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"k": v}}
	}
	o.observe(cm("a", "1"), false)
	isTwo := func(c *corev1.ConfigMap) bool { return c.Data["k"] == "2" }

	// Already true at registration: fires at once.
	o.observe(cm("b", "2"), false)
	select {
	case <-o.WhenAny(isTwo):
	default:
		t.Fatal("WhenAny did not fire for an object already satisfying it")
	}

	o.observe(cm("b", "3"), false)
	ch := o.WhenAny(isTwo)
	o.observe(cm("c", "1"), false)
	select {
	case <-ch:
		t.Fatal("WhenAny fired though no object satisfies it")
	default:
	}
	o.observe(cm("a", "2"), false)
	select {
	case <-ch:
	default:
		t.Fatal("WhenAny did not fire when one object came to satisfy it")
	}
	if len(o.waiters) != 0 {
		t.Errorf("%d waiters left after firing", len(o.waiters))
	}

	// A deletion never satisfies it.
	ch = o.WhenAny(func(c *corev1.ConfigMap) bool { return c.Data["k"] == "9" })
	o.observe(cm("z", "9"), true)
	select {
	case <-ch:
		t.Fatal("WhenAny fired on a deletion")
	default:
	}
}
