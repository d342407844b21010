package quota_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kcm-split/kcm-split/services/quota"
	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestForeignWriterOnQuotaStatus: kube-controller-manager (a client with its user agent, as
// a KCM left running after a botched switch) rewrites a quota's status.used four times with
// nothing charged changing, then kubectl once as a sentinel (once its Event is there, every
// earlier write has been seen). kube-controller-manager's episode is one Event and counts
// one; the API server's own charge at admission counts nothing; the controller answers each
// write at most once (no write war).
func TestForeignWriterOnQuotaStatus(t *testing.T) {
	testenv.Require(t, env)
	const writes = 4
	ctx := context.Background()
	c := env.Client(t)
	ns := env.Namespace(t)
	ctrl := env.StartLeading(t, controller, "ctrl")
	// A standby, which has run no term, already serves the counter at 0: the first episode of
	// its first term is then an increase that Prometheus sees.
	series := `kcm_split_foreign_writer_detected_total{controller="` + quota.Name + `"}`
	standby := env.Start(t, controller, "standby")
	poll(t, "the standby's metrics", time.Minute, func() (bool, error) {
		return standby.Metric(`leader_election_master_status{name="`+controller.Lease()+`"}`) == 0, nil
	})
	if v := standby.Metric(series); v != 0 {
		t.Errorf("the standby serves %s as %v (-1: absent), want 0", series, v)
	}
	createQuota(t, c, ns, "q", corev1.ResourceList{corev1.ResourcePods: q("10")})
	deleteQuotaAtEnd(t, c, ns, "q")
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{corev1.ResourcePods: "0"})
	// Quota admission charges status.used as the API server: not a second owner.
	if _, err := c.CoreV1().Pods(ns).Create(ctx, computePod(ns, "p", "10m", "10Mi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	charged := waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{corev1.ResourcePods: "1"})
	if !slices.ContainsFunc(charged.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
		return slices.Contains(foreign.IgnoredManagers(), e.Manager) && e.Subresource == "status"
	}) {
		t.Fatalf("no status entry of the API server in the quota's managedFields %v: the case below is not exercised", charged.ManagedFields)
	}

	rewrite := func(c kubernetes.Interface, i int) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			rq, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
			if err != nil {
				return err
			}
			rq.Status.Used = corev1.ResourceList{corev1.ResourcePods: q(fmt.Sprint(5 + i))}
			_, err = c.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, rq, metav1.UpdateOptions{})
			return err
		})
	}
	kcm := env.ClientAs(t, "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/test")
	start := time.Now()
	for i := range writes {
		if err := rewrite(kcm, i); err != nil {
			t.Fatalf("foreign write %d: %v", i, err)
		}
		// managedFields times have whole seconds: each write is seen with a time of its own.
		time.Sleep(1100 * time.Millisecond)
	}
	if err := rewrite(env.ClientAs(t, "kubectl-edit/v1.36.3 (linux/amd64) kubernetes/test"), writes); err != nil {
		t.Fatalf("sentinel write: %v", err)
	}

	var byManager map[string][]corev1.Event
	poll(t, "the sentinel's Event", time.Minute, func() (bool, error) {
		list, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + foreign.Reason})
		if err != nil {
			return false, err
		}
		byManager = map[string][]corev1.Event{}
		for _, ev := range list.Items {
			manager, _, _ := strings.Cut(strings.TrimPrefix(ev.Message, `Field manager "`), `"`)
			byManager[manager] = append(byManager[manager], ev)
		}
		return len(byManager["kubectl-edit"]) > 0 && ctrl.Metric(series) >= 2, nil
	})
	if evs := byManager["kube-controller-manager"]; len(evs) != 1 || evs[0].Count > 1 || evs[0].InvolvedObject.Name != "q" {
		t.Errorf("%d Events for kube-controller-manager's episode of %d writes, want one on the quota: %v", len(evs), writes, evs)
	} else {
		t.Logf("Event: %s", evs[0].Message)
	}
	if len(byManager) != 2 {
		t.Errorf("Events name the managers %v, want kube-controller-manager and kubectl-edit only", byManager)
	}
	if got := ctrl.Metric(series); got != 2 {
		t.Errorf("%s = %v, want 2 (one episode each for kube-controller-manager and kubectl-edit)", series, got)
	}
	evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "resourcequotas"), testenv.ReceivedAfter(start),
		func(ev testenv.AuditEvent) bool { return ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == "q" })
	if err != nil {
		t.Fatal(err)
	}
	if bound := writes + 1 + 5; len(evs) > bound {
		t.Errorf("%d writes by the controller on the quota against %d by others: it fights (bound %d)", len(evs), writes+1, bound)
	}
	t.Logf("controller writes on the quota during the episode: %d (others: %d)", len(evs), writes+1)
}
