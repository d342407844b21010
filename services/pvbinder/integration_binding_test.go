package pvbinder_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// checkOneToOne asserts every claim is Bound to its own PV, whose claimRef names it back.
func checkOneToOne(t *testing.T, c kubernetes.Interface, ns string, n int) {
	t.Helper()
	ctx := context.Background()
	claims, err := c.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvs, err := c.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]corev1.PersistentVolume{}
	for _, p := range pvs.Items {
		byName[p.Name] = p
	}
	used := map[string]string{}
	for _, cl := range claims.Items {
		if cl.Status.Phase != corev1.ClaimBound {
			t.Errorf("claim %s is %s", cl.Name, cl.Status.Phase)
			continue
		}
		if other, dup := used[cl.Spec.VolumeName]; dup {
			t.Errorf("double bind: %s and %s on %s", other, cl.Name, cl.Spec.VolumeName)
		}
		used[cl.Spec.VolumeName] = cl.Name
		p := byName[cl.Spec.VolumeName]
		if p.Spec.ClaimRef == nil || p.Spec.ClaimRef.UID != cl.UID || p.Status.Phase != corev1.VolumeBound {
			t.Errorf("PV %s of claim %s: %s", p.Name, cl.Name, describePV(&p))
		}
	}
	if len(used) != n {
		t.Errorf("%d claims bound, want %d", len(used), n)
	}
}

func createPairs(t *testing.T, c kubernetes.Interface, ns string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx := context.Background()
			if _, err := c.CoreV1().PersistentVolumes().Create(ctx, pv(fmt.Sprintf("%s-%03d", ns, i), ns, "1Gi"), metav1.CreateOptions{}); err != nil {
				t.Errorf("pv %d: %v", i, err)
			}
			if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim(ns, fmt.Sprintf("c%03d", i), ns, "1Gi"), metav1.CreateOptions{}); err != nil {
				t.Errorf("claim %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for i := range n {
			deletePV(t, c, fmt.Sprintf("%s-%03d", ns, i))
		}
	})
}

func waitAllBound(t *testing.T, c kubernetes.Interface, ns string, n int) {
	t.Helper()
	bound := 0
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		bound = 0
		for _, cl := range list.Items {
			if cl.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		return bound == n, nil
	})
	if err != nil {
		t.Fatalf("%d of %d claims bound", bound, n)
	}
}

func TestThreeHundredPairsBindOneToOne(t *testing.T) {
	// A sync period longer than the test: binding must be driven by events alone.
	c, ns, _ := withController(t, "--pvclaimbinder-sync-period=10m")
	start := time.Now()
	createPairs(t, c, ns, 300)
	created := time.Since(start)
	waitAllBound(t, c, ns, 300)
	t.Logf("created in %s, all bound %s after the start", created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	checkOneToOne(t, c, ns, 300)
}

// TestSplitBrainNeverDoubleBinds runs two binders at once with leader election off, the
// worst case of a leader change (both acting on the same objects with their own caches).
// The conditioned writes must still bind every claim to exactly one PV.
func TestSplitBrainNeverDoubleBinds(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	for _, name := range []string{"binder-1", "binder-2"} {
		ctrl := env.Start(t, controller, name, "--leader-elect=false")
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			code, _ := ctrl.Get("/readyz")
			return code == 200, nil
		})
		if err != nil {
			t.Fatalf("%s not ready", name)
		}
	}
	createPairs(t, c, ns, 150)
	waitAllBound(t, c, ns, 150)
	checkOneToOne(t, c, ns, 150)
}
