package quota_test

// Integration tests: the quota-controller binary, built as it ships, against a real etcd +
// kube-apiserver v1.36.3 (shared/testenv) whose ResourceQuota admission enforces and charges.
// The tests play every other actor (kubelet turning Pods Failed, a user editing quotas).

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kcm-split/kcm-split/services/quota"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// controller is the shipped binary, built once per test binary.
var controller = testenv.Binary{ID: quota.ControllerID}

func poll(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond()
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

func createQuota(t *testing.T, c kubernetes.Interface, ns, name string, hard corev1.ResourceList, mutate ...func(*corev1.ResourceQuota)) *corev1.ResourceQuota {
	t.Helper()
	rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	for _, m := range mutate {
		m(rq)
	}
	out, err := c.CoreV1().ResourceQuotas(ns).Create(context.Background(), rq, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create quota %s: %v", name, err)
	}
	return out
}

// waitUsed waits until the quota's status.hard equals its spec and status.used holds want
// (other names are not checked).
func waitUsed(t *testing.T, c kubernetes.Interface, ns, name string, want map[corev1.ResourceName]string) *corev1.ResourceQuota {
	t.Helper()
	var last *corev1.ResourceQuota
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		rq, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = rq
		return hardIsSpec(rq) && usedHolds(rq, want), nil
	})
	if err != nil {
		var status any
		if last != nil {
			status = last.Status
		}
		t.Fatalf("quota %s/%s: want used %v; last status %+v: %v", ns, name, want, status, err)
	}
	return last
}

// hardIsSpec reports whether the quota's status.hard equals its spec.hard. Only the controller
// writes status.hard (admission keeps the one it read), so after a spec edit it says that the
// controller has written since.
func hardIsSpec(rq *corev1.ResourceQuota) bool {
	if len(rq.Status.Hard) != len(rq.Spec.Hard) {
		return false
	}
	for n, h := range rq.Spec.Hard {
		if s, ok := rq.Status.Hard[n]; !ok || s.Cmp(h) != 0 {
			return false
		}
	}
	return true
}

// usedHolds reports whether status.used holds want (other names are not checked).
func usedHolds(rq *corev1.ResourceQuota, want map[corev1.ResourceName]string) bool {
	for n, w := range want {
		got, ok := rq.Status.Used[n]
		if !ok || got.Cmp(q(w)) != 0 {
			return false
		}
	}
	return true
}

// presetStatus gives a quota the status a controller that ran before would have left: hard as
// in the spec, nothing used. Admission then charges creates before the test starts this
// controller, whose caches hold every object from their first list: no recalculation can run
// on a cache behind what admission charged, and so write legitimately in a test that counts
// the controller's writes.
func presetStatus(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx := context.Background()
	rq, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Status = corev1.ResourceQuotaStatus{Hard: rq.Spec.Hard.DeepCopy(), Used: corev1.ResourceList{}}
	for n := range rq.Spec.Hard {
		rq.Status.Used[n] = q("0")
	}
	if _, err := c.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// cannotCountSentinel creates a quota on a resource no apiserver serves and waits for the
// controller's warning about it. Events leave the controller in the order it records them, so
// once this one is listed, any Event it recorded before (in a sync the test has waited for) is
// listed too: a check that some Event was NOT written is only meaningful after this.
func cannotCountSentinel(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	createQuota(t, c, ns, "sentinel", corev1.ResourceList{"count/nothings.sentinel.kcm-split.example.com": q("1")})
	poll(t, "the sentinel quota's warning", 30*time.Second, func() (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=sentinel"})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Reason == quota.ReasonCannotCount {
				return true, nil
			}
		}
		return false, nil
	})
}

func computePod(ns, name, cpu, mem string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{
				Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: q(cpu), corev1.ResourceMemory: q(mem)},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: q(cpu), corev1.ResourceMemory: q(mem)},
				},
			}},
		},
	}
}

func isQuotaRefusal(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota")
}

// ---- a namespaced CRD, shared by the tests that count custom resources ----

var widgets = schema.GroupVersionResource{Group: "kcm-split.example.com", Version: "v1", Resource: "widgets"}

func crd(group, plural, kind string, versions []any, conversion map[string]any) *unstructured.Unstructured {
	spec := map[string]any{
		"group": group,
		"names": map[string]any{"plural": plural, "singular": strings.TrimSuffix(plural, "s"), "kind": kind, "listKind": kind + "List"},
		"scope": "Namespaced", "versions": versions,
	}
	if conversion != nil {
		spec["conversion"] = conversion
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec":     spec,
	}}
}

func crdVersion(name string, storage bool) map[string]any {
	return map[string]any{
		"name": name, "served": true, "storage": storage,
		"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
	}
}

// ensureCRD creates the CRD (once per apiserver) and waits until its resource is served.
func ensureCRD(t *testing.T, obj *unstructured.Unstructured, served schema.GroupVersionResource) dynamic.Interface {
	t.Helper()
	if err := testenv.InstallCRD(env.Config, served, obj.Object); err != nil {
		t.Fatal(err)
	}
	return dynamic.NewForConfigOrDie(env.Config)
}

func customResource(gvr schema.GroupVersionResource, kind, ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
	}}
}

// ---- tests ----

// TestUsageAdmissionAndReplenishment walks the scenario: status.hard and correct
// status.used, admission refusing one object past the limit, usage released by deletion (and a
// Pod turning Failed, a Service changing type) long before the 5-minute resync, and spec.hard
// edits showing in status.hard.
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestUsageAdmissionAndReplenishment(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	dyn := ensureCRD(t, crd(widgets.Group, widgets.Resource, "Widget", []any{crdVersion("v1", true)}, nil), widgets)

	createQuota(t, c, ns, "compute", corev1.ResourceList{
		corev1.ResourcePods: q("3"), corev1.ResourceRequestsCPU: q("2"), corev1.ResourceLimitsMemory: q("1Gi"),
		corev1.ResourceMemory: q("1Gi"),
	}, func(rq *corev1.ResourceQuota) {
		// The controller writes status from its cache: metadata must survive it.
		rq.Labels = map[string]string{"team": "a"}
		rq.Annotations = map[string]string{"note": "kept"}
	})
	createQuota(t, c, ns, "objects", corev1.ResourceList{
		corev1.ResourceConfigMaps:                             q("2"),
		"count/widgets." + corev1.ResourceName(widgets.Group): q("2"),
		corev1.ResourceServicesLoadBalancers:                  q("1"),
	})
	// The default 5-minute resync: everything below that happens in seconds is replenishment.
	env.StartLeading(t, controller, "ctrl")

	synced := waitUsed(t, c, ns, "compute", map[corev1.ResourceName]string{"pods": "0", "requests.cpu": "0", "limits.memory": "0", "memory": "0"})
	if synced.Labels["team"] != "a" || synced.Annotations["note"] != "kept" {
		t.Fatalf("the status write lost metadata: labels %v annotations %v", synced.Labels, synced.Annotations)
	}
	waitUsed(t, c, ns, "objects", map[corev1.ResourceName]string{"configmaps": "0", "count/widgets.kcm-split.example.com": "0", "services.loadbalancers": "0"})

	// Pods up to the limit, then one more.
	for i := range 3 {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, computePod(ns, fmt.Sprintf("p%d", i), "500m", "256Mi"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, computePod(ns, "p3", "500m", "256Mi"), metav1.CreateOptions{}); !isQuotaRefusal(err) {
		t.Fatalf("4th pod: want refused by quota, got %v", err)
	}
	waitUsed(t, c, ns, "compute", map[corev1.ResourceName]string{"pods": "3", "requests.cpu": "1500m", "memory": "768Mi", "limits.memory": "768Mi"})

	// Deleting one releases its usage: the refused create succeeds soon after.
	start := time.Now()
	if err := c.CoreV1().Pods(ns).Delete(ctx, "p0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	poll(t, "a new pod admitted after a delete", 30*time.Second, func() (bool, error) {
		_, err := c.CoreV1().Pods(ns).Create(ctx, computePod(ns, "p3", "500m", "256Mi"), metav1.CreateOptions{})
		if isQuotaRefusal(err) {
			return false, nil
		}
		return err == nil, err
	})
	t.Logf("delete to admitted create: %v", time.Since(start))

	// A Pod turning Failed stops being charged, though it still exists.
	p1, err := c.CoreV1().Pods(ns).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p1.Status.Phase = corev1.PodFailed
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, p1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "compute", map[corev1.ResourceName]string{"pods": "2", "requests.cpu": "1", "memory": "512Mi"})

	// Config maps and custom resources: up to the limit, one more refused, delete, admitted.
	for i := range 2 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm%d", i)}}
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(widgets).Namespace(ns).Create(ctx, customResource(widgets, "Widget", ns, fmt.Sprintf("w%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm2"}}, metav1.CreateOptions{}); !isQuotaRefusal(err) {
		t.Fatalf("3rd configmap: want refused, got %v", err)
	}
	if _, err := dyn.Resource(widgets).Namespace(ns).Create(ctx, customResource(widgets, "Widget", ns, "w2"), metav1.CreateOptions{}); !isQuotaRefusal(err) {
		t.Fatalf("3rd widget: want refused, got %v", err)
	}
	waitUsed(t, c, ns, "objects", map[corev1.ResourceName]string{"configmaps": "2", "count/widgets.kcm-split.example.com": "2"})
	if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, "cm0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(widgets).Namespace(ns).Delete(ctx, "w0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "objects", map[corev1.ResourceName]string{"configmaps": "1", "count/widgets.kcm-split.example.com": "1"})

	// Load balancers: one allowed; turning it into a ClusterIP Service gives it back.
	lb := func(name string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}},
		}
	}
	if _, err := c.CoreV1().Services(ns).Create(ctx, lb("lb1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Services(ns).Create(ctx, lb("lb2"), metav1.CreateOptions{}); !isQuotaRefusal(err) {
		t.Fatalf("2nd load balancer: want refused, got %v", err)
	}
	waitUsed(t, c, ns, "objects", map[corev1.ResourceName]string{"services.loadbalancers": "1"})
	svc, err := c.CoreV1().Services(ns).Get(ctx, "lb1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = 0
	}
	svc.Spec.AllocateLoadBalancerNodePorts = nil
	svc.Spec.ExternalTrafficPolicy = ""
	if _, err := c.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "objects", map[corev1.ResourceName]string{"services.loadbalancers": "0"})
	if _, err := c.CoreV1().Services(ns).Create(ctx, lb("lb2"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("load balancer after the first one changed type: %v", err)
	}

	// spec.hard edits show in status.hard.
	rq, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "compute", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Spec.Hard[corev1.ResourcePods] = q("5")
	rq.Spec.Hard[corev1.ResourceSecrets] = q("4")
	if _, err := c.CoreV1().ResourceQuotas(ns).Update(ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitUsed(t, c, ns, "compute", map[corev1.ResourceName]string{"pods": "2", "secrets": "0"})
	if h := got.Status.Hard[corev1.ResourcePods]; h.Cmp(q("5")) != 0 {
		t.Fatalf("status.hard pods = %s, want 5", h.String())
	}
}

// controllerQuotaWrites counts the controller's writes to ResourceQuotas in ns.
func controllerQuotaWrites(t *testing.T, ns string) int {
	t.Helper()
	evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "resourcequotas"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.ObjectRef.Namespace == ns {
			n++
		}
	}
	return n
}

// TestUnchangedResyncWritesNothing runs full recalculations every second over usage that does
// not change: none of them may write.
func TestUnchangedResyncWritesNothing(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	createQuota(t, c, ns, "q", corev1.ResourceList{corev1.ResourcePods: q("10"), corev1.ResourceRequestsMemory: q("10Gi"), corev1.ResourceConfigMaps: q("10")})
	// Admission charges the creates below before the controller starts (see presetStatus):
	// a recalculation racing its informers could otherwise write, legitimately, a moment
	// before they deliver the new objects.
	presetStatus(t, c, ns, "q")
	// Usage in units the apiserver spells differently from how the sum comes out.
	for i := range 2 {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, computePod(ns, fmt.Sprintf("p%d", i), "100m", "0.5Gi"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{"pods": "2", "requests.memory": "1Gi", "configmaps": "1"})

	before := controllerQuotaWrites(t, ns)
	ctrl := env.StartLeading(t, controller, "ctrl", "--"+quota.FlagSyncPeriod+"=1s")
	unchanged := ctrl.Metric(`kcm_split_quota_syncs_total{outcome="unchanged"}`)
	// Three more full recalculations: each one syncs every quota in the cluster.
	all, err := c.CoreV1().ResourceQuotas("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "three full recalculations", 60*time.Second, func() (bool, error) {
		return ctrl.Metric(`kcm_split_quota_syncs_total{outcome="unchanged"}`) >= unchanged+3*float64(len(all.Items)), nil
	})
	if after := controllerQuotaWrites(t, ns); after != before {
		t.Fatalf("resync over unchanged usage wrote %d times", after-before)
	}
	// The quiet above was the controller agreeing, not ignoring the quota: a delete gives
	// usage back, which only the controller does.
	if err := c.CoreV1().Pods(ns).Delete(ctx, "p0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{"pods": "1", "requests.memory": "0.5Gi", "configmaps": "1"})
}

// TestBrokenConversionWebhookIsolated: a CRD whose conversion webhook cannot be reached cannot
// be listed. A quota on config maps alone is unaffected; a quota that also counts the CRD
// publishes its config maps, keeps the last value for the CRD and gets an Event naming it.
func TestBrokenConversionWebhookIsolated(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	gadgetsV1 := schema.GroupVersionResource{Group: "broken.kcm-split.example.com", Version: "v1", Resource: "gadgets"}
	gadgetsV2 := gadgetsV1.GroupResource().WithVersion("v2")
	// Stored as v1, preferred (and so listed by the controller) as v2: listing needs the
	// webhook, which nothing serves.
	dyn := ensureCRD(t, crd(gadgetsV1.Group, "gadgets", "Gadget",
		[]any{crdVersion("v1", true), crdVersion("v2", false)},
		map[string]any{"strategy": "Webhook", "webhook": map[string]any{
			"conversionReviewVersions": []any{"v1"},
			"clientConfig":             map[string]any{"url": "https://127.0.0.1:1/convert"},
		}}), gadgetsV1)
	if _, err := dyn.Resource(gadgetsV1).Namespace(ns).Create(ctx, customResource(gadgetsV1, "Gadget", ns, "g0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(gadgetsV2).Namespace(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("listing gadgets at v2 works: the test's premise (a broken conversion) does not hold")
	}

	gadgetCount := corev1.ResourceName("count/gadgets." + gadgetsV1.Group)
	createQuota(t, c, ns, "plain", corev1.ResourceList{corev1.ResourceConfigMaps: q("5")})
	mixed := createQuota(t, c, ns, "mixed", corev1.ResourceList{corev1.ResourceConfigMaps: q("5"), gadgetCount: q("5")})
	// The last good value, as an earlier controller would have left it.
	mixed.Status = corev1.ResourceQuotaStatus{Hard: mixed.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceConfigMaps: q("0"), gadgetCount: q("1")}}
	if _, err := c.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, mixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	ctrl := env.StartLeading(t, controller, "ctrl", "--"+quota.FlagInformerSyncTimeout+"=2s")
	// Admission refuses config maps until the controller has published plain's status.
	waitUsed(t, c, ns, "plain", map[corev1.ResourceName]string{"configmaps": "0"})
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, "cm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Both quotas saw the config map come and go (admission charged both 1: only the
	// controller brings them back to 0); the mixed one kept its gadget count.
	waitUsed(t, c, ns, "plain", map[corev1.ResourceName]string{"configmaps": "0"})
	waitUsed(t, c, ns, "mixed", map[corev1.ResourceName]string{"configmaps": "0", gadgetCount: "1"})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm2"}}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "plain", map[corev1.ResourceName]string{"configmaps": "1"})
	waitUsed(t, c, ns, "mixed", map[corev1.ResourceName]string{"configmaps": "1", gadgetCount: "1"})

	poll(t, "an Event naming the resource that cannot be counted", 30*time.Second, func() (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=mixed"})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Reason == quota.ReasonCannotCount && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, "gadgets."+gadgetsV1.Group) {
				return true, nil
			}
		}
		return false, nil
	})
	// plain's last sync was the one that gave the config map back, waited for above.
	cannotCountSentinel(t, c, ns)
	evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=plain"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 0 {
		t.Fatalf("the quota that does not count gadgets got events: %v", evs.Items)
	}
	if v := ctrl.Metric(`kcm_split_quota_uncountable_resource_types`); v != 1 {
		t.Fatalf("kcm_split_quota_uncountable_resource_types = %v, want 1", v)
	}
	// Counted once the status is written, which is after the warning is recorded: polled.
	poll(t, `kcm_split_quota_syncs_total{outcome="partial"} >= 1`, 30*time.Second, func() (bool, error) {
		return ctrl.Metric(`kcm_split_quota_syncs_total{outcome="partial"}`) >= 1, nil
	})
}

func TestBadFlagsExit2(t *testing.T) {
	testenv.Require(t, env)
	for _, arg := range []string{"--" + quota.FlagConcurrentSyncs + "=0", "--" + quota.FlagSyncPeriod + "=-1s", "--shards=0", "--shard-index=3"} {
		p := env.Start(t, controller, "bad", arg)
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: still running", arg)
		}
		if p.ExitCode() != 2 || !strings.Contains(p.Tail(5), strings.TrimPrefix(strings.Split(arg, "=")[0], "--")) {
			t.Fatalf("%s: exit %d, output %q; want 2 and the flag named", arg, p.ExitCode(), p.Tail(5))
		}
	}
}

// TestCRDCreatedLaterIsCounted: a CRD that did not exist when the controller started is found
// by discovery and counted by count/<resource>.<group>, deletions included.
func TestCRDCreatedLaterIsCounted(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	env.StartLeading(t, controller, "ctrl")

	gizmos := schema.GroupVersionResource{Group: "later.kcm-split.example.com", Version: "v1", Resource: "gizmos"}
	dyn := ensureCRD(t, crd(gizmos.Group, gizmos.Resource, "Gizmo", []any{crdVersion("v1", true)}, nil), gizmos)
	name := corev1.ResourceName("count/gizmos." + gizmos.Group)
	createQuota(t, c, ns, "q", corev1.ResourceList{name: q("2")})
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{name: "0"})
	for i := range 2 {
		if _, err := dyn.Resource(gizmos).Namespace(ns).Create(ctx, customResource(gizmos, "Gizmo", ns, fmt.Sprintf("g%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dyn.Resource(gizmos).Namespace(ns).Create(ctx, customResource(gizmos, "Gizmo", ns, "g2"), metav1.CreateOptions{}); !isQuotaRefusal(err) {
		t.Fatalf("3rd gizmo: want refused, got %v", err)
	}
	if err := dyn.Resource(gizmos).Namespace(ns).Delete(ctx, "g0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{name: "1"})
}

// TestControllerAgreesWithAdmission: admission charges every create; a full recalculation
// afterwards must find exactly the same numbers (so it writes nothing) for Pods with init
// containers, sidecars, pod-level resources, hugepages, extended resources and mixed units, and
// for claims (overall and per StorageClass) and Services (node ports, load balancers).
// Over 80 lines: one namespace filled with every kind of object admission charges, then one comparison of the totals.
func TestControllerAgreesWithAdmission(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	createQuota(t, c, ns, "q", corev1.ResourceList{
		corev1.ResourcePods: q("20"), "count/pods": q("20"),
		corev1.ResourceRequestsCPU: q("20"), corev1.ResourceLimitsCPU: q("20"),
		corev1.ResourceRequestsMemory: q("20Gi"), corev1.ResourceLimitsMemory: q("20Gi"),
		corev1.ResourceRequestsEphemeralStorage: q("20Gi"),
		"requests.hugepages-2Mi":                q("1Gi"), "requests.example.com/gpu": q("8"),
	})
	createQuota(t, c, ns, "storage-and-services", corev1.ResourceList{
		corev1.ResourcePersistentVolumeClaims: q("10"), corev1.ResourceRequestsStorage: q("100Gi"),
		"gold.storageclass.storage.k8s.io/requests.storage":       q("50Gi"),
		"gold.storageclass.storage.k8s.io/persistentvolumeclaims": q("5"),
		corev1.ResourceServices:                                   q("10"), corev1.ResourceServicesNodePorts: q("10"), corev1.ResourceServicesLoadBalancers: q("5"),
	})
	// Admission charges every create below before the controller starts (see presetStatus);
	// from here on only admission writes the quotas, unless a recalculation disagrees.
	presetStatus(t, c, ns, "q")
	presetStatus(t, c, ns, "storage-and-services")
	before := controllerQuotaWrites(t, ns)

	res := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i+1 < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = q(kv[i+1])
		}
		return out
	}
	ctr := func(name string, req, lim corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: name, Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	always := corev1.ContainerRestartPolicyAlways
	sidecar := ctr("side", res("cpu", "100m", "memory", "64Mi"), res("cpu", "100m", "memory", "64Mi"))
	sidecar.RestartPolicy = &always
	pods := []corev1.PodSpec{
		{ // two containers in mixed units, an init container larger than both
			Containers: []corev1.Container{
				ctr("a", res("cpu", "250m", "memory", "0.5Gi"), res("cpu", "0.5", "memory", "1Gi")),
				ctr("b", res("cpu", "0.1", "memory", "500M"), res("cpu", "100m", "memory", "536870912")),
			},
			InitContainers: []corev1.Container{ctr("init", res("cpu", "1", "memory", "100Mi"), res("cpu", "1", "memory", "100Mi"))},
		},
		{ // a sidecar runs alongside the app
			Containers:     []corev1.Container{ctr("app", res("cpu", "200m", "memory", "128Mi"), res("cpu", "200m", "memory", "128Mi"))},
			InitContainers: []corev1.Container{sidecar},
		},
		{ // pod-level resources
			Containers: []corev1.Container{ctr("app", nil, nil)},
			Resources:  &corev1.ResourceRequirements{Requests: res("cpu", "1", "memory", "1Gi"), Limits: res("cpu", "2", "memory", "2Gi")},
		},
		{ // hugepages, an extended resource, ephemeral storage
			Containers: []corev1.Container{ctr("app",
				res("cpu", "10m", "memory", "10Mi", "hugepages-2Mi", "4Mi", "example.com/gpu", "2", "ephemeral-storage", "1G"),
				res("cpu", "10m", "memory", "10Mi", "hugepages-2Mi", "4Mi", "example.com/gpu", "2"))},
		},
	}
	for i, spec := range pods {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p%d", i)}, Spec: spec}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	claim := func(name, class, size string) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q(size)}},
			},
		}
		if class != "" {
			pvc.Spec.StorageClassName = &class
		}
		return pvc
	}
	for _, pvc := range []*corev1.PersistentVolumeClaim{claim("a", "gold", "1.5Gi"), claim("b", "gold", "1500M"), claim("c", "", "1Gi")} {
		if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ports := func(n int) []corev1.ServicePort {
		var out []corev1.ServicePort
		for i := range n {
			out = append(out, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(80 + i)})
		}
		return out
	}
	noNodePorts := false
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "np"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: ports(2)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lb"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports(3)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lb-direct"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports(2), AllocateLoadBalancerNodePorts: &noNodePorts}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cip"}, Spec: corev1.ServiceSpec{Ports: ports(1)}},
	} {
		if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUsed(t, c, ns, "storage-and-services", map[corev1.ResourceName]string{
		"persistentvolumeclaims": "3", "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "2",
		"requests.storage": "4184354560", "gold.storageclass.storage.k8s.io/requests.storage": "3110612736",
		"services": "4", "services.nodeports": "5", "services.loadbalancers": "2",
	})
	// What admission charged, by hand: requests.cpu = max(350m, 1) + 300m + 1 + 10m.
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{
		"pods": "4", "count/pods": "4", "requests.cpu": "2310m", "limits.cpu": "3310m",
		"requests.hugepages-2Mi": "4Mi", "requests.example.com/gpu": "2", "requests.ephemeral-storage": "1G",
	})
	ctrl := env.StartLeading(t, controller, "ctrl", "--"+quota.FlagSyncPeriod+"=1s")
	all, err := c.CoreV1().ResourceQuotas("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unchanged := ctrl.Metric(`kcm_split_quota_syncs_total{outcome="unchanged"}`)
	poll(t, "three full recalculations", 60*time.Second, func() (bool, error) {
		return ctrl.Metric(`kcm_split_quota_syncs_total{outcome="unchanged"}`) >= unchanged+3*float64(len(all.Items)), nil
	})
	if after := controllerQuotaWrites(t, ns); after != before {
		rq, _ := c.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
		t.Fatalf("recalculation disagreed with admission (%d writes); status now %v", after-before, rq.Status.Used)
	}
	// The quiet above was the controller agreeing, not ignoring the quotas: deletes give
	// usage back, which only the controller does.
	if err := c.CoreV1().Pods(ns).Delete(ctx, "p3", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Services(ns).Delete(ctx, "lb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{
		"pods": "3", "count/pods": "3", "requests.cpu": "2300m", "limits.cpu": "3300m",
		"requests.hugepages-2Mi": "0", "requests.example.com/gpu": "0", "requests.ephemeral-storage": "0",
	})
	waitUsed(t, c, ns, "storage-and-services", map[corev1.ResourceName]string{
		"persistentvolumeclaims": "3", "services": "3", "services.nodeports": "2", "services.loadbalancers": "1",
	})
}

// TestClaimAllocationChangeReplenishes: a claim's storage usage is the larger of its request
// and what was allocated for it; when the allocation shrinks back (a failed expansion rolled
// back), the usage is given back without waiting for the resync.
func TestClaimAllocationChangeReplenishes(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	createQuota(t, c, ns, "q", corev1.ResourceList{corev1.ResourceRequestsStorage: q("100Gi"), "gold.storageclass.storage.k8s.io/requests.storage": q("100Gi")})
	env.StartLeading(t, controller, "ctrl")
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{"requests.storage": "0"})
	class := "gold"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q("1Gi")}},
		},
	}
	pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{"requests.storage": "1Gi", "gold.storageclass.storage.k8s.io/requests.storage": "1Gi"})

	pvc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: q("5Gi")}
	if pvc, err = c.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{"requests.storage": "5Gi", "gold.storageclass.storage.k8s.io/requests.storage": "5Gi"})

	pvc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: q("1Gi")}
	if _, err = c.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{"requests.storage": "1Gi", "gold.storageclass.storage.k8s.io/requests.storage": "1Gi"})
}

// TestScopedQuotas: scopes and scope selectors count only the Pods in them, as admission does.
func TestScopedQuotas(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	scoped := func(scopes ...corev1.ResourceQuotaScope) func(*corev1.ResourceQuota) {
		return func(rq *corev1.ResourceQuota) { rq.Spec.Scopes = scopes }
	}
	selector := func(reqs ...corev1.ScopedResourceSelectorRequirement) func(*corev1.ResourceQuota) {
		return func(rq *corev1.ResourceQuota) {
			rq.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: reqs}
		}
	}
	createQuota(t, c, ns, "besteffort", corev1.ResourceList{corev1.ResourcePods: q("10")}, scoped(corev1.ResourceQuotaScopeBestEffort))
	createQuota(t, c, ns, "terminating", corev1.ResourceList{corev1.ResourcePods: q("10"), corev1.ResourceRequestsCPU: q("10")}, scoped(corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotBestEffort))
	createQuota(t, c, ns, "no-priority", corev1.ResourceList{corev1.ResourcePods: q("10")}, selector(corev1.ScopedResourceSelectorRequirement{
		ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpDoesNotExist,
	}))
	env.StartLeading(t, controller, "ctrl")
	for _, name := range []string{"besteffort", "terminating", "no-priority"} {
		waitUsed(t, c, ns, name, map[corev1.ResourceName]string{"pods": "0"})
	}
	deadline := int64(600)
	specs := map[string]corev1.PodSpec{
		"be":    {Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		"burst": {Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("250m")}}}}},
		"job":   {ActiveDeadlineSeconds: &deadline, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("500m")}}}}},
	}
	for name, spec := range specs {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
	}
	waitUsed(t, c, ns, "besteffort", map[corev1.ResourceName]string{"pods": "1"})
	waitUsed(t, c, ns, "terminating", map[corev1.ResourceName]string{"pods": "1", "requests.cpu": "500m"})
	waitUsed(t, c, ns, "no-priority", map[corev1.ResourceName]string{"pods": "3"})
	// Deleting the terminating Pod releases it from the scoped quotas that counted it.
	if err := c.CoreV1().Pods(ns).Delete(ctx, "job", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "terminating", map[corev1.ResourceName]string{"pods": "0", "requests.cpu": "0"})
	waitUsed(t, c, ns, "no-priority", map[corev1.ResourceName]string{"pods": "2"})
	// besteffort's 1 is also its value before the delete: only a count of the controller
	// made after it (the Pods' cache has seen the delete: terminating's 0 says so) shows the
	// delete did not take the best-effort Pod with it. A BestEffort quota limits only pods.
	recountBumping(t, c, ns, "besteffort", corev1.ResourcePods, map[corev1.ResourceName]string{"pods": "1"})
}

// TestEventsAreNotCounted: as upstream, count/events is never counted (nor are Events refused
// by admission for it); the quota's other resources are, and no warning says events cannot be
// counted.
func TestEventsAreNotCounted(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	env.StartLeading(t, controller, "ctrl")

	createQuota(t, c, ns, "q", corev1.ResourceList{"count/events": q("1"), "count/events.events.k8s.io": q("1"), "count/configmaps": q("5")})
	for i := range 3 {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("e%d", i), Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: "c0"},
			Reason:         "Test", Message: "m", Type: corev1.EventTypeNormal,
		}
		if _, err := c.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatalf("event %d refused over count/events: %v", i, err)
		}
	}
	// Admission refuses config maps until the controller has published the quota's status.
	waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{"count/configmaps": "0"})
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rq := waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{"count/configmaps": "1"})
	for _, n := range []corev1.ResourceName{"count/events", "count/events.events.k8s.io"} {
		if used, ok := rq.Status.Used[n]; ok {
			t.Errorf("status.used[%s] = %s, want it absent: upstream never counts events", n, used.String())
		}
	}
	// The quota's only sync, whose status write was waited for above, recorded any warning.
	cannotCountSentinel(t, c, ns)
	evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=q"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Reason == quota.ReasonCannotCount {
			t.Errorf("warning about events: %s", ev.Message)
		}
	}
}

// ---- ResourceClaims (DRA) ----

func deviceClassFor(t *testing.T, c kubernetes.Interface, name, extended string) {
	t.Helper()
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if extended != "" {
		dc.Spec.ExtendedResourceName = &extended
	}
	if _, err := c.ResourceV1().DeviceClasses().Create(context.Background(), dc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("device class %s: %v", name, err)
	}
	t.Cleanup(func() { _ = c.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func resourceClaim(name string, reqs ...resourcev1.DeviceRequest) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: reqs}},
	}
}

func exactDevices(req, class string, n int64) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: req, Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n,
	}}
}

// recount proves the controller itself computes want, not admission charging creates: the
// quota's usage is overwritten with nonsense and its secrets limit raised, so that the
// controller syncs it from its caches (see recountBumping).
func recount(t *testing.T, c kubernetes.Interface, ns, name string, want map[corev1.ResourceName]string) {
	t.Helper()
	recountBumping(t, c, ns, name, corev1.ResourceSecrets, want)
}

// recountBumping is recount raising the limit of bump (a scoped quota accepts only some
// names). It waits for a write of the controller made after the raise (status.hard again
// equal to the spec) holding want. The informers of the counted types are not ordered with
// the quota's: a sync may run before they deliver the objects the test just created, and
// write a count without them. Such a write is not the answer the test waits for: the limit
// is raised again, for another count, until one holds want or the time is up.
func recountBumping(t *testing.T, c kubernetes.Interface, ns, name string, bump corev1.ResourceName, want map[corev1.ResourceName]string) {
	t.Helper()
	ctx := context.Background()
	quotas := c.CoreV1().ResourceQuotas(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rq, err := quotas.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rq.Status.Used == nil {
			rq.Status.Used = corev1.ResourceList{}
		}
		for n := range want {
			rq.Status.Used[n] = q("99")
		}
		_, err = quotas.UpdateStatus(ctx, rq, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	raise := func() error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			rq, err := quotas.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			h := rq.Spec.Hard[bump]
			h.Add(q("1"))
			rq.Spec.Hard[bump] = h
			_, err = quotas.Update(ctx, rq, metav1.UpdateOptions{})
			return err
		})
	}
	if err := raise(); err != nil {
		t.Fatal(err)
	}
	var last *corev1.ResourceQuota
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		rq, err := quotas.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = rq
		if !hardIsSpec(rq) {
			return false, nil // no write since the raise yet
		}
		if usedHolds(rq, want) {
			return true, nil
		}
		return false, raise()
	})
	if err != nil {
		var status any
		if last != nil {
			status = last.Status
		}
		t.Fatalf("recount of quota %s/%s: want used %v; last status %+v: %v", ns, name, want, status, err)
	}
}

// The upstream e2e "should create a ResourceQuota and capture the life of a ResourceClaim", in
// substance: usage per device class and claim count, admission refusing the claim over the
// limit, usage given back on delete. Before the claim evaluator, status.used never held these
// names and admission refused every claim of the namespace.
func TestResourceClaimLife(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	gold := "gold-" + ns
	deviceClassFor(t, c, gold, "")
	devices := corev1.ResourceName(gold + corev1.ResourceClaimsPerClass)
	const claimCount = "count/resourceclaims.resource.k8s.io"

	createQuota(t, c, ns, "dra", corev1.ResourceList{claimCount: q("3"), devices: q("4"), corev1.ResourceQuotas: q("1")})
	env.StartLeading(t, controller, "ctrl")
	waitUsed(t, c, ns, "dra", map[corev1.ResourceName]string{claimCount: "0", devices: "0", corev1.ResourceQuotas: "1"})

	claims := c.ResourceV1().ResourceClaims(ns)
	if _, err := claims.Create(ctx, resourceClaim("one", exactDevices("r", gold, 1)), metav1.CreateOptions{}); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	waitUsed(t, c, ns, "dra", map[corev1.ResourceName]string{claimCount: "1", devices: "1"})

	// Alternatives are charged their worst case: 2 of gold, though 1 might do.
	alt := resourceClaim("alt", resourcev1.DeviceRequest{Name: "r", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "two", DeviceClassName: gold, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2},
		{Name: "one", DeviceClassName: gold, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1},
	}})
	if _, err := claims.Create(ctx, alt, metav1.CreateOptions{}); err != nil {
		t.Fatalf("claim with alternatives: %v", err)
	}
	waitUsed(t, c, ns, "dra", map[corev1.ResourceName]string{claimCount: "2", devices: "3"})
	recount(t, c, ns, "dra", map[corev1.ResourceName]string{claimCount: "2", devices: "3"})

	// Two more devices would make 5 of 4: refused.
	if _, err := claims.Create(ctx, resourceClaim("over", exactDevices("r", gold, 2)), metav1.CreateOptions{}); !isQuotaRefusal(err) {
		t.Fatalf("claim over the device limit: want refused by quota, got %v", err)
	}
	// All devices of a class is charged as many as an allocation can hold.
	all := resourceClaim("all", resourcev1.DeviceRequest{Name: "r", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: gold, AllocationMode: resourcev1.DeviceAllocationModeAll}})
	if _, err := claims.Create(ctx, all, metav1.CreateOptions{}); !isQuotaRefusal(err) {
		t.Fatalf("claim for all devices: want refused by quota, got %v", err)
	}

	// A delete gives the usage back, and the refused claim is admitted.
	if err := claims.Delete(ctx, "alt", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "dra", map[corev1.ResourceName]string{claimCount: "1", devices: "1"})
	if _, err := claims.Create(ctx, resourceClaim("over", exactDevices("r", gold, 2)), metav1.CreateOptions{}); err != nil {
		t.Fatalf("claim after a delete: %v", err)
	}
	waitUsed(t, c, ns, "dra", map[corev1.ResourceName]string{claimCount: "2", devices: "3"})
	for _, name := range []string{"one", "over"} {
		if err := claims.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUsed(t, c, ns, "dra", map[corev1.ResourceName]string{claimCount: "0", devices: "0"})
}

// With DRAExtendedResource (on by default), a class's extended resource is charged for Pods
// asking for it and for claims of the class, but the claim generated for a Pod is not charged
// again what the Pod already is. The controller must agree with admission on the sum.
func TestResourceClaimExtendedResources(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	class := "gpu-" + ns
	gpu := corev1.ResourceName("example.com/gpu-" + ns)
	deviceClassFor(t, c, class, string(gpu))
	requests := corev1.ResourceName(corev1.DefaultResourceRequestsPrefix + string(gpu))
	implicit := corev1.ResourceName(corev1.ResourceImplicitExtendedClaimsPerClass + class)

	createQuota(t, c, ns, "ext", corev1.ResourceList{requests: q("4"), implicit: q("10")})
	env.StartLeading(t, controller, "ctrl")
	waitUsed(t, c, ns, "ext", map[corev1.ResourceName]string{requests: "0", implicit: "0"})

	p := computePod(ns, "gpu-pod", "100m", "64Mi")
	p.Spec.Containers[0].Resources.Requests[gpu] = q("1")
	p.Spec.Containers[0].Resources.Limits[gpu] = q("1")
	p, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("pod: %v", err)
	}
	waitUsed(t, c, ns, "ext", map[corev1.ResourceName]string{requests: "1", implicit: "0"})

	// The claim the scheduler would generate for the Pod: its one device is the Pod's, not
	// charged twice under the extended resource (its implicit name the Pod does not ask for).
	own := resourceClaim("gpu-pod-extended", exactDevices("container-0-request-0", class, 1))
	own.Annotations = map[string]string{resourcev1.ExtendedResourceClaimAnnotation: "true"}
	own.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: new(bool)}}
	*own.OwnerReferences[0].Controller = true
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the pod's claim: %v", err)
	}
	// Any other claim of the class is charged its devices in full.
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, resourceClaim("other", exactDevices("r", class, 2)), metav1.CreateOptions{}); err != nil {
		t.Fatalf("another claim: %v", err)
	}
	waitUsed(t, c, ns, "ext", map[corev1.ResourceName]string{requests: "3", implicit: "3"})
	recount(t, c, ns, "ext", map[corev1.ResourceName]string{requests: "3", implicit: "3"})
	// 3 + 2 > 4: admission, counting the same way, refuses.
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, resourceClaim("over", exactDevices("r", class, 2)), metav1.CreateOptions{}); !isQuotaRefusal(err) {
		t.Fatalf("claim over the extended resource: want refused by quota, got %v", err)
	}

	// The Pod gone, its claim is charged in full: usage stays 3, now all of it the claims'.
	if err := c.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := c.ResourceV1().ResourceClaims(ns).Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, c, ns, "ext", map[corev1.ResourceName]string{requests: "1", implicit: "1"})
	// 1 and 1 is also what the Pod still counted (its claim then not) makes, with only the
	// other claim's delete seen. A Pod created now asking 1 more: a count that includes it
	// has seen the first Pod's delete (one watch, in order), and is 2 only if the orphaned
	// claim is charged in full.
	after := computePod(ns, "after", "100m", "64Mi")
	after.Spec.Containers[0].Resources.Requests[gpu] = q("1")
	after.Spec.Containers[0].Resources.Limits[gpu] = q("1")
	if _, err := c.CoreV1().Pods(ns).Create(ctx, after, metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod after the delete: %v", err)
	}
	recount(t, c, ns, "ext", map[corev1.ResourceName]string{requests: "2", implicit: "1"})
}
