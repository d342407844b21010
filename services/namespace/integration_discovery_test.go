package namespace_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestDiscoveryFailure registers an APIService whose backend cannot answer (a Service with no
// endpoints): the namespace's other content is deleted, NamespaceDeletionDiscoveryFailure
// names the group version, the namespace is not finalized, and it goes as soon as the
// APIService is removed.
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestDiscoveryFailure(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	dyn := dynamicClient(t)
	ctrl := env.StartLeading(t, controller, "namespace-controller")

	const (
		group   = "broken.kcm-split.test"
		version = "v1"
		svcName = "kcm-split-broken"
	)
	apiServices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	_, err := client.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": version + "." + group},
		"spec": map[string]any{
			"group": group, "version": version,
			"service":               map[string]any{"namespace": "default", "name": svcName, "port": int64(443)},
			"insecureSkipTLSVerify": true,
			"groupPriorityMinimum":  int64(1000),
			"versionPriority":       int64(15),
		},
	}}
	if _, err := dyn.Resource(apiServices).Create(context.Background(), apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	removed := false
	removeAPIService := func() {
		if removed {
			return
		}
		removed = true
		if err := dyn.Resource(apiServices).Delete(context.Background(), version+"."+group, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	t.Cleanup(removeAPIService)

	ns := newNamespace(t, client, "discovery")
	createConfigMaps(t, client, ns, 20)
	createSecrets(t, client, ns, 5)
	deleteNamespace(t, client, ns)

	waitCondition(t, client, ns, corev1.NamespaceDeletionDiscoveryFailure, group+"/"+version)
	poll(t, goneTimeout, "the namespace's ConfigMaps and Secrets to be deleted", func(ctx context.Context) (bool, error) {
		cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		secrets, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(cms.Items) == 0 && len(secrets.Items) == 0, nil
	})
	poll(t, time.Minute, "a Warning Event naming the failing API", func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Namespace,involvedObject.name=" + ns})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && e.Reason == "DiscoveryFailed" && strings.Contains(e.Message, group+"/"+version)
		}), nil
	})
	// Content is gone, yet the namespace stays while discovery fails: the failing group
	// might hold objects in it. Let a few more syncs happen to be sure.
	time.Sleep(3 * time.Second)
	cur, err := client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("namespace finalized while discovery failed: %v", err)
	}
	if !slices.Contains(cur.Spec.Finalizers, corev1.FinalizerKubernetes) {
		t.Fatalf("finalizer removed while discovery failed: %v", cur.Spec.Finalizers)
	}
	if v := ctrl.Metric(`kcm_split_namespace_terminating`); v < 1 {
		t.Errorf("kcm_split_namespace_terminating = %v, want >= 1", v)
	}

	// Removing the APIService unblocks it, without waiting for the retry backoff.
	removeAPIService()
	poll(t, time.Minute, "the namespace to go once the APIService is removed", func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	// The deletion's duration is observed once the finalize call has returned, so the
	// namespace may be seen gone a moment before: wait for it.
	poll(t, 30*time.Second, "deletion_duration_seconds to count the deletion", func(context.Context) (bool, error) {
		return ctrl.Metric(`kcm_split_namespace_deletion_duration_seconds_count`) >= 1, nil
	})
}
