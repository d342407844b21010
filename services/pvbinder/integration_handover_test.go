package pvbinder_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/kcm-split/kcm-split/services/pvbinder"
	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestForeignBinderEpisodeHandover (issue 49): kube-controller-manager's binder at it across a
// handover is one episode. Leader a reports its write of a claim's binding annotations and
// keeps the episode in <Lease name>-foreign-writers; a is killed with SIGKILL and b takes the
// Lease over; kube-controller-manager marks another claim bound: b, which read the episode
// before its informers started, reports nothing (its counter stays at 0 for it, no Event on
// that claim), while a write of another manager after it is reported, so b did look.
func TestForeignBinderEpisodeHandover(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const lease = "pvbinder-handover-foreign"
	const counter = `kcm_split_foreign_writer_detected_total{controller="` + pvbinder.Name + `"}`
	const kcm = "kube-controller-manager"
	store := lease + foreign.EpisodesSuffix
	testenv.DeleteKeptOnCleanup(t, c, store)
	args := append([]string{"--leader-elect-resource-name=" + lease}, testenv.ShortLeaseFlags()...)
	markBound := func(name, manager string) {
		t.Helper()
		createClaim(t, c, claim(ns, name, ns, "100Gi"))
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, storagehelpers.AnnBindCompleted, "yes")
			_, err = c.CoreV1().PersistentVolumeClaims(ns).Update(ctx, pvc, metav1.UpdateOptions{FieldManager: manager})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	reported := func(ctrl *testenv.Controller, claim string, count float64) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return strings.Contains(events(t, c, ns, claim), foreign.Reason+":") && ctrl.Metric(counter) >= count, nil
		})
		if err != nil {
			t.Fatalf("%s not reported: %s = %v; events: %s", claim, counter, ctrl.Metric(counter), events(t, c, ns, claim))
		}
	}

	a := env.Start(t, controller, "a", args...)
	a.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	markBound("first", kcm)
	reported(a, "first", 1)
	keptIn(t, c, store, `"manager":"`+kcm+`"`)

	a.Kill()
	b := env.Start(t, controller, "b", args...)
	b.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	markBound("second", kcm)
	markBound("sentinel", "kubectl-edit")
	reported(b, "sentinel", 1)
	if got, ev := b.Metric(counter), events(t, c, ns, "second"); got != 1 || strings.Contains(ev, foreign.Reason) {
		t.Fatalf("b reported kube-controller-manager's episode again: %s = %v (want 1, the sentinel's); events of the claim it wrote: %s", counter, got, ev)
	}
}

// keptIn waits for the ConfigMap name in kube-system to contain want.
func keptIn(t *testing.T, c kubernetes.Interface, name, want string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = cm.Data[foreign.EpisodesKey]
		}
		return strings.Contains(last, want), nil
	})
	if err != nil {
		t.Fatalf("%s never kept %s: %q", name, want, last)
	}
}
