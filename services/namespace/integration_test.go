package namespace_test

// Integration tests: the namespace-controller binary, built as it ships, against a real etcd +
// kube-apiserver v1.36.3 (shared/testenv). Top-level tests run one after another, each with
// its own controller process: TestDeletion runs its cases in parallel under one controller;
// the restart and discovery-failure cases need the controller (or discovery) to themselves.
// Every deletion includes the controller's fixed 5 s grace period (upstream has no knob for
// it), so timeouts are generous.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/services/namespace"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// controller is the shipped binary, built once per test binary.
var controller = testenv.Binary{ID: namespace.ControllerID}

const (
	// goneTimeout bounds a namespace's deletion: 5 s grace plus the work, on a machine
	// shared with other test suites.
	goneTimeout = 3 * time.Minute
)

func poll(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// newNamespace creates a namespace the test deletes itself (testenv.Namespace would do too,
// but its name is long, and tests here want several).
func newNamespace(t *testing.T, client kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func deleteNamespace(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	if err := client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitGone(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	poll(t, goneTimeout, "namespace "+ns+" to be gone", func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// waitCondition waits until the namespace's condition of type ct is True with a message
// containing every one of parts, and returns the message.
func waitCondition(t *testing.T, client kubernetes.Interface, ns string, ct corev1.NamespaceConditionType, parts ...string) string {
	t.Helper()
	var msg string
	poll(t, goneTimeout, fmt.Sprintf("condition %s naming %q on %s", ct, parts, ns), func(ctx context.Context) (bool, error) {
		cur, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range cur.Status.Conditions {
			if c.Type != ct || c.Status != corev1.ConditionTrue {
				continue
			}
			msg = c.Message
			for _, p := range parts {
				if !strings.Contains(c.Message, p) {
					return false, nil
				}
			}
			return true, nil
		}
		return false, nil
	})
	return msg
}

// parallel runs fn for 0..n-1 on 16 goroutines and fails t on the first error.
func parallel(t *testing.T, n int, fn func(ctx context.Context, i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(context.Background(), i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

func createConfigMaps(t *testing.T, client kubernetes.Interface, ns string, n int, finalizers ...string) {
	t.Helper()
	parallel(t, n, func(ctx context.Context, i int) error {
		_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Finalizers: finalizers},
			Data:       map[string]string{"k": "v"},
		}, metav1.CreateOptions{})
		return err
	})
}

func createSecrets(t *testing.T, client kubernetes.Interface, ns string, n int) {
	t.Helper()
	parallel(t, n, func(ctx context.Context, i int) error {
		_, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%05d", i)},
			StringData: map[string]string{"k": "v"},
		}, metav1.CreateOptions{})
		return err
	})
}

// createPod creates an unscheduled Pod: without a node it is deleted at once, as the
// apiserver does not wait for a kubelet that will never run it.
func createPod(t *testing.T, client kubernetes.Interface, ns, name string, finalizers ...string) {
	t.Helper()
	_, err := client.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func removeFinalizers(t *testing.T, client kubernetes.Interface, resource, ns, name string) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	var err error
	switch resource {
	case "pods":
		_, err = client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	case "configmaps":
		_, err = client.CoreV1().ConfigMaps(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	default:
		t.Fatalf("removeFinalizers: %s not handled", resource)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func countConfigMaps(t *testing.T, client kubernetes.Interface, ns string) int {
	t.Helper()
	n := 0
	opts := metav1.ListOptions{Limit: 1000}
	for {
		list, err := client.CoreV1().ConfigMaps(ns).List(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		n += len(list.Items)
		if list.Continue == "" {
			return n
		}
		opts.Continue = list.Continue
	}
}

// ---- a CRD, created after the controller started ----

var widgets = schema.GroupVersionResource{Group: "kcm-split.test", Version: "v1", Resource: "widgets"}

func dynamicClient(t *testing.T) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// ensureWidgetCRD creates the widgets CRD once per package and waits until it is served.
var crdOnce sync.Once

func ensureWidgetCRD(t *testing.T) {
	t.Helper()
	dyn := dynamicClient(t)
	crdOnce.Do(func() {
		crd := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1",
			"kind":       "CustomResourceDefinition",
			"metadata":   map[string]any{"name": "widgets.kcm-split.test"},
			"spec": map[string]any{
				"group": "kcm-split.test",
				"scope": "Namespaced",
				"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
				"versions": []any{map[string]any{
					"name": "v1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
				}},
			},
		}}
		crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
		if _, err := dyn.Resource(crds).Create(context.Background(), crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	})
	poll(t, time.Minute, "the widgets CRD to be served", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(widgets).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
}

func createWidget(t *testing.T, ns, name string) {
	t.Helper()
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kcm-split.test/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name},
	}}
	if _, err := dynamicClient(t).Resource(widgets).Namespace(ns).Create(context.Background(), w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// ---- tests ----

// Over 80 lines: parallel subtests sharing the one controller this test starts (one Lease, one process).
func TestDeletion(t *testing.T) {
	testenv.Require(t, env)
	ctrl := env.StartLeading(t, controller, "namespace-controller")
	client := env.Client(t)

	t.Run("everything goes, CRD objects too", func(t *testing.T) {
		t.Parallel()
		ensureWidgetCRD(t)
		ns := newNamespace(t, client, "all")
		createConfigMaps(t, client, ns, 20)
		createSecrets(t, client, ns, 20)
		for i := range 3 {
			_, err := client.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", i)},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			createPod(t, client, ns, fmt.Sprintf("pod-%d", i))
			createWidget(t, ns, fmt.Sprintf("widget-%d", i))
		}
		deleteNamespace(t, client, ns)
		waitGone(t, client, ns)
		// The namespace can only go once the controller finalized it, and it does that
		// only after a sync found nothing left; check the CRD objects anyway, as they are
		// the ones only discovery can find.
		left, err := dynamicClient(t).Resource(widgets).Namespace(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(left.Items) != 0 {
			t.Fatalf("%d widgets left in deleted namespace %s", len(left.Items), ns)
		}
		if v := ctrl.Metric(`kcm_split_namespace_objects_deleted_total{resource="widgets.kcm-split.test"}`); v < 3 {
			t.Errorf("objects_deleted_total for widgets = %v, want >= 3", v)
		}
	})

	t.Run("pods go first", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, client, "pods-first")
		createConfigMaps(t, client, ns, 5)
		createSecrets(t, client, ns, 5)
		const hold = "kcm-split.test/hold"
		createPod(t, client, ns, "held", hold)
		createPod(t, client, ns, "free")
		deleteNamespace(t, client, ns)

		msg := waitCondition(t, client, ns, corev1.NamespaceContentRemaining, "pods. has 1 resource instances")
		waitCondition(t, client, ns, corev1.NamespaceFinalizersRemaining, hold+" in 1 resource instances")
		if strings.Contains(msg, "configmaps") {
			t.Errorf("ContentRemaining names ConfigMaps while a Pod is left, so they were looked at: %q", msg)
		}
		// The controller has made at least one sync; nothing but the Pods may be touched.
		// Check twice, a little apart, while the Pod is held.
		for range 2 {
			if n := countConfigMaps(t, client, ns); n != 5 {
				t.Fatalf("%d ConfigMaps left while a Pod remains, want all 5", n)
			}
			cms, err := client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, cm := range cms.Items {
				if cm.DeletionTimestamp != nil {
					t.Fatalf("ConfigMap %s deleted while a Pod remains", cm.Name)
				}
			}
			time.Sleep(2 * time.Second)
		}
		if evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "configmaps", "secrets")); err != nil {
			t.Fatal(err)
		} else {
			for _, ev := range evs {
				if ev.ObjectRef.Namespace == ns {
					t.Fatalf("the controller wrote %s %s in %s while a Pod remained", ev.Verb, ev.ObjectRef.Resource, ns)
				}
			}
		}
		removeFinalizers(t, client, "pods", ns, "held")
		waitGone(t, client, ns)
	})

	t.Run("the rest goes as soon as the Pods are gone, not when their grace period says", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, client, "pods-gone")
		createConfigMaps(t, client, ns, 5)
		const keep = "kcm-split.test/keep"
		createKept(t, client, ns, keep)
		// On a node, so its deletion is graceful: an hour, which the estimate-based requeue
		// would wait for (capped at the 5 m sync period) before looking again.
		grace := int64(3600)
		_, err := client.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "slow"},
			Spec: corev1.PodSpec{NodeName: "kcm-split-test-node", TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		deleteNamespace(t, client, ns)
		// Play the kubelet: the Pod stops as soon as it is asked to.
		poll(t, goneTimeout, "the Pod to be deleted", func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods(ns).Get(ctx, "slow", metav1.GetOptions{})
			return err == nil && p.DeletionTimestamp != nil, err
		})
		podDeleted := time.Now()
		if err := client.CoreV1().Pods(ns).Delete(context.Background(), "slow", *metav1.NewDeleteOptions(0)); err != nil {
			t.Fatal(err)
		}
		podGone := time.Now()
		// The final state of this step: only the held ConfigMap is left, and the conditions
		// say so, naming it. The estimate would be 30 minutes away, the sync period 5.
		poll(t, 2*time.Minute, "only the held ConfigMap to remain", func(ctx context.Context) (bool, error) {
			cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(cms.Items) == 1 && cms.Items[0].Name == "kept", err
		})
		rest := time.Now()
		waitCondition(t, client, ns, corev1.NamespaceFinalizersRemaining, keep+" in 1 resource instances (ConfigMap/kept)")
		t.Logf("namespace deleted -> Pod deleted %s, Pod gone -> only finalizers remain %s (namespace deleted -> only finalizers remain %s)",
			podDeleted.Sub(deleted).Round(time.Millisecond), rest.Sub(podGone).Round(time.Millisecond), rest.Sub(deleted).Round(time.Millisecond))
		removeFinalizers(t, client, "configmaps", ns, "kept")
		waitGone(t, client, ns)
	})

	t.Run("a finalizer keeps the namespace and is named", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, client, "finalizer")
		const keep = "kcm-split.test/keep"
		createConfigMaps(t, client, ns, 3)
		createKept(t, client, ns, keep)
		deleteNamespace(t, client, ns)
		waitCondition(t, client, ns, corev1.NamespaceFinalizersRemaining, keep+" in 1 resource instances")
		waitCondition(t, client, ns, corev1.NamespaceContentRemaining, "configmaps. has 1 resource instances")
		poll(t, time.Minute, "an Event naming the finalizer", func(ctx context.Context) (bool, error) {
			evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Namespace,involvedObject.name=" + ns})
			if err != nil {
				return false, err
			}
			return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
				return e.Reason == "SomeFinalizersRemain" && strings.Contains(e.Message, keep)
			}), nil
		})
		cur, err := client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cur.Status.Phase != corev1.NamespaceTerminating {
			t.Fatalf("phase %q, want Terminating", cur.Status.Phase)
		}
		cms, err := client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range cms.Items {
			removeFinalizers(t, client, "configmaps", ns, cm.Name)
		}
		waitGone(t, client, ns)
	})

	t.Run("5000 ConfigMaps", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, client, "many")
		createConfigMaps(t, client, ns, 5000)
		deleteNamespace(t, client, ns)
		waitGone(t, client, ns)
		if n := countConfigMaps(t, client, ns); n != 0 {
			t.Fatalf("%d ConfigMaps left", n)
		}
	})
}

func createKept(t *testing.T, client kubernetes.Interface, ns, finalizer string) {
	t.Helper()
	_, err := client.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept", Finalizers: []string{finalizer}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRestartMidDeletion kills the controller while it deletes a large namespace and starts
// it again: the namespace still goes, and nothing outside it is touched.
func TestRestartMidDeletion(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	ns := newNamespace(t, client, "restart")
	bystander := newNamespace(t, client, "bystander")
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), bystander, metav1.DeleteOptions{})
	})
	const n = 4000
	createConfigMaps(t, client, ns, n)
	createSecrets(t, client, ns, 500)
	createConfigMaps(t, client, bystander, 50)

	first := env.StartLeading(t, controller, "first")
	deleteNamespace(t, client, ns)
	// Kill it as soon as deletion visibly started: SIGKILL, no graceful drain.
	poll(t, goneTimeout, "deletion to start", func(context.Context) (bool, error) {
		return countConfigMaps(t, client, ns) < n, nil
	})
	first.Kill()
	left := countConfigMaps(t, client, ns)
	t.Logf("killed the controller with %d of %d ConfigMaps left", left, n)

	// A new process takes the Lease once the dead one's expires (15 s).
	second := env.Start(t, controller, "second")
	second.WaitLeadingAndSynced(controller.Lease(), 2*time.Minute)
	waitGone(t, client, ns)

	if got := countConfigMaps(t, client, bystander); got != 50 {
		t.Fatalf("bystander namespace has %d ConfigMaps, want 50", got)
	}
	evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix()))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.ObjectRef.Namespace == bystander || (ev.ObjectRef.Resource == "namespaces" && ev.ObjectRef.Name == bystander) {
			t.Fatalf("the controller wrote %s %s/%s in the bystander namespace", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name)
		}
	}
}
