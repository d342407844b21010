package quota_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcm-split/kcm-split/services/quota"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestUncountableNamedThenClearedWithStaleness: a quota counting a type whose conversion
// webhook is down is annotated with the name it cannot count, and its staleness gauge grows;
// once the CRD's conversion is repaired the type is counted, the annotation goes in the same
// write that publishes the real count, and the gauge restarts. Deleting the quota drops its
// series.
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestUncountableNamedThenClearedWithStaleness(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	// A group of its own: this test repairs the CRD, which others must keep broken.
	v1GVR := schema.GroupVersionResource{Group: "mended.kcm-split.example.com", Version: "v1", Resource: "doohickeys"}
	v2GVR := v1GVR.GroupResource().WithVersion("v2")
	broken := map[string]any{"strategy": "Webhook", "webhook": map[string]any{
		"conversionReviewVersions": []any{"v1"},
		"clientConfig":             map[string]any{"url": "https://127.0.0.1:1/convert"},
	}}
	crdName := "doohickeys." + v1GVR.Group
	dyn := ensureCRD(t, crd(v1GVR.Group, "doohickeys", "Doohickey",
		[]any{crdVersion("v1", true), crdVersion("v2", false)}, broken), v1GVR)
	if _, err := dyn.Resource(v1GVR).Namespace(ns).Create(ctx, customResource(v1GVR, "Doohickey", ns, "d0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v2GVR).Namespace(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("listing doohickeys at v2 works: the test's premise (a broken conversion) does not hold")
	}

	counted := corev1.ResourceName("count/doohickeys." + v1GVR.Group)
	mixed := createQuota(t, c, ns, "mixed", corev1.ResourceList{corev1.ResourceConfigMaps: q("5"), counted: q("5")})
	// A last value that is not the real count (1), so that the real count is seen to arrive.
	mixed.Status = corev1.ResourceQuotaStatus{Hard: mixed.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceConfigMaps: q("0"), counted: q("3")}}
	if _, err := c.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, mixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	ctrl := env.StartLeading(t, controller, "ctrl", "--"+quota.FlagInformerSyncTimeout+"=2s")
	series := fmt.Sprintf(`kcm_split_quota_usage_staleness_seconds{name="mixed",namespace=%q}`, ns)
	start := time.Now()
	poll(t, "the annotation naming the resource that cannot be counted", 30*time.Second, func() (bool, error) {
		rq, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "mixed", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return rq.Annotations[quota.AnnUncountable] == string(counted), nil
	})
	t.Logf("annotated %v after the controller started", time.Since(start).Round(time.Millisecond))
	rq := waitUsed(t, c, ns, "mixed", map[corev1.ResourceName]string{"configmaps": "0", counted: "3"})
	if len(rq.Annotations) != 1 {
		t.Fatalf("annotations %v, want only %s", rq.Annotations, quota.AnnUncountable)
	}
	first := ctrl.Metric(series)
	if first < 0 {
		t.Fatalf("%s not exported", series)
	}
	poll(t, "the staleness gauge to grow", 30*time.Second, func() (bool, error) {
		return ctrl.Metric(series) >= first+1, nil
	})

	// Repaired: the apiserver converts by itself, listing works again.
	fixed := time.Now()
	patch := []byte(`{"spec":{"conversion":{"strategy":"None","webhook":null}}}`)
	if _, err := dyn.Resource(testenv.CRDResource).Patch(ctx, crdName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the annotation to go and the real count to be published", 60*time.Second, func() (bool, error) {
		rq, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "mixed", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, annotated := rq.Annotations[quota.AnnUncountable]
		return !annotated && usedHolds(rq, map[corev1.ResourceName]string{"configmaps": "0", counted: "1"}), nil
	})
	t.Logf("counted %v after the repair", time.Since(fixed).Round(time.Millisecond))
	// Counted in full after the repair: the gauge was restarted since. Without the restart it
	// would be older than the repair.
	got := ctrl.Metric(series)
	if elapsed := time.Since(fixed).Seconds(); got < 0 || got > elapsed {
		t.Fatalf("%s = %v after the full count, want at most the %.3f s since the repair", series, got, elapsed)
	}

	if err := c.CoreV1().ResourceQuotas(ns).Delete(ctx, "mixed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the deleted quota's series to go", 30*time.Second, func() (bool, error) {
		return ctrl.Metric(series) < 0, nil
	})
}
