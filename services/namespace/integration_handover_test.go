package namespace_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcm-split/kcm-split/services/namespace"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestUnavailableGroupHandoverDrill (issue 49): what one leader learnt of an aggregated API
// survives its crash. Leader a sees the idle API answer; the API goes away and a namespace
// is finalized under --allow-deletion-with-unavailable-groups, as designed. a is then killed
// with SIGKILL (no release, no drain) and b, which never saw the API answer, takes the Lease
// over when it expires: a namespace deleted now is finalized all the same, from the memory a
// kept in the cluster. Before the memory was kept, b found the API never discovered and the
// namespace stayed Terminating. A group version nobody saw answering still blocks with b.
//
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestUnavailableGroupHandoverDrill(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	const (
		lease   = "namespace-handover"
		allowed = 3 * time.Second
	)
	args := append([]string{
		"--" + namespace.FlagAllowDeletionWithUnavailableGroups + "=" + allowed.String(),
		"--leader-elect-resource-name=" + lease,
	}, testenv.ShortLeaseFlags()...)
	store := lease + namespace.DiscoveryStoreSuffix
	testenv.DeleteKeptOnCleanup(t, client, store)

	createIdleAPIService(t, client, dynamicClient(t), serveIdleAPI(t))
	setIdleService(t, client, true)
	waitIdle(t, client, true)

	// a leads and sees the API answer.
	a := env.Start(t, controller, "a", args...)
	a.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	poll(t, time.Minute, "a to discover the idle API answering", func(context.Context) (bool, error) {
		return a.Metric(`kcm_split_namespace_discoveries_total{result="complete"}`) >= 1, nil
	})

	// The API goes away; with a leading, a namespace is finalized once the flag allows.
	setIdleService(t, client, false)
	waitIdle(t, client, false)
	before := newNamespace(t, client, "handover-before")
	createConfigMaps(t, client, before, 3)
	deleteNamespace(t, client, before)
	waitGone(t, client, before)
	// The Event follows the finalize call.
	poll(t, time.Minute, "the Event of the namespace finalized before the handover", func(context.Context) (bool, error) {
		return len(namespaceEvents(t, client, before, namespace.EventFinalizedWithUnavailableAPIs)) > 0, nil
	})

	// The leader crashes: SIGKILL, no drain, no release of its Lease.
	killed := time.Now()
	a.Kill()

	// b never saw the API answer. It takes the Lease once it expires.
	b := env.Start(t, controller, "b", args...)
	b.WaitLeadingAndSynced(lease, testenv.LeadTimeout)
	t.Logf("b leads %s after a's SIGKILL", time.Since(killed).Round(time.Millisecond))

	// The same deletion as before the handover ends the same way.
	after := newNamespace(t, client, "handover-after")
	createConfigMaps(t, client, after, 3)
	createSecrets(t, client, after, 3)
	start := time.Now()
	deleteNamespace(t, client, after)
	waitGone(t, client, after)
	t.Logf("after the handover: namespace deleted -> finalized in %s with %s unavailable", time.Since(start).Round(time.Millisecond), idleGV)
	var evs []corev1.Event
	poll(t, time.Minute, "the Event of the namespace finalized after the handover", func(context.Context) (bool, error) {
		evs = namespaceEvents(t, client, after, namespace.EventFinalizedWithUnavailableAPIs)
		return len(evs) > 0 && b.Metric(`kcm_split_namespace_finalized_with_unavailable_apis_total`) == 1, nil
	})
	if !strings.Contains(evs[0].Message, idleGV) {
		t.Fatalf("Event does not name %s: %s", idleGV, evs[0].Message)
	}
	if n := countConfigMaps(t, client, after); n != 0 {
		t.Fatalf("%d ConfigMaps leaked", n)
	}

	// What b started from: a's memory, in the ConfigMap beside the Lease, naming what the
	// API served (a cluster-scoped resource and a namespaced review that holds nothing).
	cm, err := client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), store, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kept struct {
		GroupVersions map[string]struct {
			Served       time.Time  `json:"served"`
			Holders      []string   `json:"holders"`
			Others       []string   `json:"others"`
			FailingSince *time.Time `json:"failingSince"`
		} `json:"groupVersions"`
	}
	if err := json.Unmarshal([]byte(cm.Data[namespace.DiscoveryStoreKey]), &kept); err != nil {
		t.Fatal(err)
	}
	e, ok := kept.GroupVersions[idleGV]
	if !ok || len(e.Holders) != 0 || strings.Join(e.Others, ",") != "gadgetreviews,gadgets" || e.FailingSince == nil || !e.Served.Before(*e.FailingSince) {
		t.Fatalf("kept memory of %s = %+v (present %v), want served before failing, no holders, others gadgetreviews,gadgets", idleGV, e, ok)
	}
	if e.Served.After(killed) {
		t.Fatalf("%s served at %s, after a was killed (%s): b cannot have seen it answer", idleGV, e.Served, killed)
	}

	// A group version nobody ever saw answering still blocks after the handover: what was
	// kept vouches only for what was seen.
	dyn := dynamicClient(t)
	apiServices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	const neverGroup, neverVersion = "never.kcm-split.test", "v1"
	never := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": neverVersion + "." + neverGroup},
		"spec": map[string]any{
			"group": neverGroup, "version": neverVersion,
			"service":               map[string]any{"namespace": "default", "name": "kcm-split-never", "port": int64(443)},
			"insecureSkipTLSVerify": true, "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
		},
	}}
	if _, err := dyn.Resource(apiServices).Create(context.Background(), never, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	removeNever := func() {
		_ = dyn.Resource(apiServices).Delete(context.Background(), neverVersion+"."+neverGroup, metav1.DeleteOptions{})
	}
	t.Cleanup(removeNever)
	blocked := newNamespace(t, client, "handover-never")
	deleteNamespace(t, client, blocked)
	waitCondition(t, client, blocked, corev1.NamespaceDeletionDiscoveryFailure, neverGroup+"/"+neverVersion)
	stillBlocked(t, client, blocked, allowed+3*time.Second)
	// Gone, it blocks no more.
	removeNever()
	waitGone(t, client, blocked)
}
