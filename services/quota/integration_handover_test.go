package quota_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kcm-split/kcm-split/services/quota"
	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// handoverArgs make a binary of its own Lease that a standby takes over within seconds of the
// holder's SIGKILL.
func handoverArgs(lease string, more ...string) []string {
	args := append([]string{"--leader-elect-resource-name=" + lease}, testenv.ShortLeaseFlags()...)
	return append(args, more...)
}

// keptConfigMap waits for the ConfigMap name in kube-system to hold want under key.
func keptConfigMap(t *testing.T, c kubernetes.Interface, name, key, want string) {
	t.Helper()
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("last seen in %s: %s", name, last)
		}
	}()
	poll(t, "the ConfigMap "+name+" to keep "+want, time.Minute, func() (bool, error) {
		cm, err := c.CoreV1().ConfigMaps("kube-system").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = cm.Data[key]
		return strings.Contains(last, want), nil
	})
}

// deleteQuotaAtEnd deletes quota ns/name when the test ends: a quota whose status another
// manager wrote last stays a foreign writer's in the cache of every later test's controller
// (nothing deletes the test namespaces' contents here), which then reports it at its start.
func deleteQuotaAtEnd(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Cleanup(func() {
		err := c.CoreV1().ResourceQuotas(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting quota %s/%s: %v", ns, name, err)
		}
	})
}

// foreignEvents lists the foreign-writer Events of namespace ns by the manager they name.
func foreignEvents(t *testing.T, c kubernetes.Interface, ns string) map[string][]corev1.Event {
	t.Helper()
	list, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + foreign.Reason})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]corev1.Event{}
	for _, ev := range list.Items {
		manager, _, _ := strings.Cut(strings.TrimPrefix(ev.Message, `Field manager "`), `"`)
		out[manager] = append(out[manager], ev)
	}
	return out
}

// TestForeignWriterEpisodeHandoverDrill (issue 49): a foreign writer still at it across a
// handover is one episode. kube-controller-manager (a client with its user agent) rewrites a
// quota's status.used every second; leader a reports it once and keeps the episode beside its
// Lease. a is killed with SIGKILL (no release) and b takes the Lease over while the writes go
// on; once b has seen them (a kubectl write after them is reported, so every earlier one has
// been looked at), kube-controller-manager still has one Event and b counted no episode of it.
// Before the episode was kept, b reported it again: a second Event, b's counter at 2.
//
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestForeignWriterEpisodeHandoverDrill(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const lease = "quota-handover-foreign"
	store := lease + foreign.EpisodesSuffix
	testenv.DeleteKeptOnCleanup(t, c, store)
	args := handoverArgs(lease)
	series := `kcm_split_foreign_writer_detected_total{controller="` + quota.Name + `"}`

	a := env.Start(t, controller, "a", args...)
	a.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	createQuota(t, c, ns, "q", corev1.ResourceList{corev1.ResourcePods: q("10")})
	deleteQuotaAtEnd(t, c, ns, "q")
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{corev1.ResourcePods: "0"})

	rewrite := func(c kubernetes.Interface, used int) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			rq, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
			if err != nil {
				return err
			}
			rq.Status.Used = corev1.ResourceList{corev1.ResourcePods: q(fmt.Sprint(used))}
			_, err = c.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, rq, metav1.UpdateOptions{})
			return err
		})
	}
	kcm := env.ClientAs(t, "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/test")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(1100 * time.Millisecond): // managedFields times have whole seconds
			}
			if err := rewrite(kcm, 5+i%3); err != nil {
				t.Errorf("foreign write %d: %v", i, err)
				return
			}
			writes.Add(1)
		}
	})
	stopWriting := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopWriting)

	poll(t, "a's Event for kube-controller-manager", time.Minute, func() (bool, error) {
		return len(foreignEvents(t, c, ns)["kube-controller-manager"]) > 0 && a.Metric(series) == 1, nil
	})
	keptConfigMap(t, c, store, foreign.EpisodesKey, `"manager":"kube-controller-manager"`)

	// The leader crashes: SIGKILL, no drain, no release of its Lease. The writes go on.
	killed := time.Now()
	a.Kill()
	b := env.Start(t, controller, "b", args...)
	b.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	t.Logf("b leads %s after a's SIGKILL", time.Since(killed).Round(time.Millisecond))
	writesBefore := writes.Load()
	poll(t, "three more writes of kube-controller-manager with b leading", time.Minute, func() (bool, error) {
		return writes.Load() >= writesBefore+3, nil
	})
	stopWriting()

	// A sentinel: once its Event is there, b has looked at every earlier write.
	if err := rewrite(env.ClientAs(t, "kubectl-edit/v1.36.3 (linux/amd64) kubernetes/test"), 9); err != nil {
		t.Fatalf("sentinel write: %v", err)
	}
	var byManager map[string][]corev1.Event
	poll(t, "the sentinel's Event", time.Minute, func() (bool, error) {
		byManager = foreignEvents(t, c, ns)
		return len(byManager["kubectl-edit"]) > 0 && b.Metric(series) >= 1, nil
	})
	if evs := byManager["kube-controller-manager"]; len(evs) != 1 {
		msgs := make([]string, 0, len(evs))
		for _, ev := range evs {
			msgs = append(msgs, ev.Source.Host+": "+ev.Message)
		}
		t.Errorf("%d Events for kube-controller-manager's one episode across the handover, want 1: %q", len(evs), msgs)
	}
	if got := b.Metric(series); got != 1 {
		t.Errorf("b's %s = %v, want 1 (the sentinel's episode only: kube-controller-manager's was a's)", series, got)
	}
	t.Logf("kube-controller-manager wrote %d times, %d of them with b leading", writes.Load(), writes.Load()-writesBefore)
}

// TestStalenessClockHandoverDrill (issue 49): a quota that cannot be counted keeps its age
// across a handover. Leader a cannot count a quota on a type whose conversion webhook is
// down; its staleness gauge grows. a is killed with SIGKILL and b takes the Lease over: b
// cannot count the quota either, and its gauge goes on from a's clock (the age since a first
// synced it) instead of starting at b's first sync. Before the clock was kept, b's gauge
// started again at 0, hiding how long the type had been uncountable.
func TestStalenessClockHandoverDrill(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	const lease = "quota-handover-staleness"
	store := lease + quota.StalenessStoreSuffix
	testenv.DeleteKeptOnCleanup(t, c, store)
	args := handoverArgs(lease, "--"+quota.FlagInformerSyncTimeout+"=2s")
	// The broken group TestBrokenConversionWebhookIsolated makes (and nothing repairs).
	gadgetsV1 := schema.GroupVersionResource{Group: "broken.kcm-split.example.com", Version: "v1", Resource: "gadgets"}
	dyn := ensureCRD(t, crd(gadgetsV1.Group, "gadgets", "Gadget",
		[]any{crdVersion("v1", true), crdVersion("v2", false)},
		map[string]any{"strategy": "Webhook", "webhook": map[string]any{
			"conversionReviewVersions": []any{"v1"},
			"clientConfig":             map[string]any{"url": "https://127.0.0.1:1/convert"},
		}}), gadgetsV1)
	// Listing at v2 needs the webhook once a gadget is stored.
	if _, err := dyn.Resource(gadgetsV1).Namespace(ns).Create(context.Background(), customResource(gadgetsV1, "Gadget", ns, "g0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gadgetCount := corev1.ResourceName("count/gadgets." + gadgetsV1.Group)
	createQuota(t, c, ns, "stuck", corev1.ResourceList{corev1.ResourceConfigMaps: q("5"), gadgetCount: q("5")})
	series := fmt.Sprintf(`kcm_split_quota_usage_staleness_seconds{name="stuck",namespace=%q}`, ns)

	a := env.Start(t, controller, "a", args...)
	a.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	poll(t, "a's gauge of the uncountable quota to pass 10 s", time.Minute, func() (bool, error) {
		return a.Metric(series) >= 10, nil
	})
	keptConfigMap(t, c, store, quota.StalenessStoreKey, `"`+ns+`/stuck"`)
	aAge, aAt := a.Metric(series), time.Now()

	killed := time.Now()
	a.Kill()
	b := env.Start(t, controller, "b", args...)
	b.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	t.Logf("b leads %s after a's SIGKILL", time.Since(killed).Round(time.Millisecond))
	poll(t, "b's first partial sync", time.Minute, func() (bool, error) {
		return b.Metric(`kcm_split_quota_syncs_total{outcome="partial"}`) >= 1, nil
	})
	got := b.Metric(series)
	want := aAge + time.Since(aAt).Seconds() - 1
	t.Logf("a's gauge %.1f s before the kill; b's %.1f s after taking over (b started %.1f s ago)", aAge, got, time.Since(killed).Seconds())
	if got < want {
		t.Fatalf("b's %s = %.1f, want at least %.1f: a's age of the quota went on (b's own clock would start at its first sync)", series, got, want)
	}
}
