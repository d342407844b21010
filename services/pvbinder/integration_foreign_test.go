package pvbinder_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/kcm-split/kcm-split/services/pvbinder"
	"github.com/kcm-split/kcm-split/shared/foreign"
)

// TestForeignBinderReported (issue 49, point 4): kube-controller-manager's binder left
// running writes a claim's binding annotations, then a volume's phase: reported once for
// the episode (an Event on the claim, the counter at 1); this binder's own bind is not.
func TestForeignBinderReported(t *testing.T) {
	c, ns, ctrl := withController(t)
	ctx := context.Background()
	const counter = `kcm_split_foreign_writer_detected_total{controller="` + pvbinder.Name + `"}`
	const kcm = "kube-controller-manager"
	if got := ctrl.Metric(counter); got != 0 {
		t.Fatalf("%s = %v at start, want 0", counter, got)
	}

	// This binder's own bind: every binding field written, nothing reported.
	createPV(t, c, pv(ns+"-a", ns, "1Gi"))
	waitPV(t, c, ns+"-a", "Available", phase(corev1.VolumeAvailable))
	createClaim(t, c, claim(ns, "data", ns, "1Gi"))
	waitClaim(t, c, ns, "data", "Bound", boundTo(ns+"-a"))
	waitPV(t, c, ns+"-a", "Bound", phase(corev1.VolumeBound))
	createPV(t, c, pv(ns+"-b", ns, "5Gi"))
	waitPV(t, c, ns+"-b", "Available", phase(corev1.VolumeAvailable))
	if got := ctrl.Metric(counter); got != 0 {
		t.Fatalf("this binder's own writes reported: %s = %v; events: %s", counter, got, events(t, c, ns, "data"))
	}

	// kube-controller-manager marks a pending claim bound.
	createClaim(t, c, claim(ns, "lonely", ns, "100Gi"))
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "lonely", metav1.GetOptions{})
		if err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, storagehelpers.AnnBindCompleted, "yes")
		metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, storagehelpers.AnnBoundByController, "yes")
		_, err = c.CoreV1().PersistentVolumeClaims(ns).Update(ctx, pvc, metav1.UpdateOptions{FieldManager: kcm})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(events(t, c, ns, "lonely"), foreign.Reason+":") && ctrl.Metric(counter) == 1, nil
	})
	if err != nil {
		t.Fatalf("not reported: %s = %v; events: %s", counter, ctrl.Metric(counter), events(t, c, ns, "lonely"))
	}
	if ev := events(t, c, ns, "lonely"); strings.Count(ev, foreign.Reason) != 1 || !strings.Contains(ev, kcm) {
		t.Fatalf("events %q, want one %s naming %s", ev, foreign.Reason, kcm)
	}

	// The same episode: kube-controller-manager releases a volume; no second report.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		v, err := c.CoreV1().PersistentVolumes().Get(ctx, ns+"-b", metav1.GetOptions{})
		if err != nil {
			return err
		}
		v.Status.Phase = corev1.VolumeReleased
		_, err = c.CoreV1().PersistentVolumes().UpdateStatus(ctx, v, metav1.UpdateOptions{FieldManager: kcm})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if got, ev := ctrl.Metric(counter), events(t, c, "default", ns+"-b"); got != 1 || strings.Contains(ev, foreign.Reason) {
		t.Fatalf("a second write of the episode reported again: %s = %v; volume events: %s", counter, got, ev)
	}
}
