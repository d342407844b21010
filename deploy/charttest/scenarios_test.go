package charttest

// Each controller's scenario for the RBAC test: the core of what its own integration tests
// show, driven from outside with an admin client (the test plays kubelet where needed).

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// eventually polls cond for up to 60s, failing the test with what when it never holds.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// endpointsScenario: a Service and a ready Pod get Endpoints (create); the Pod turning
// unready moves its address (update); deleting the Service removes the Endpoints (delete).
func endpointsScenario(t *testing.T, admin kubernetes.Interface, ns string) {
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
		}},
	}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1", Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	created, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setPodReady := func(p *corev1.Pod, ready bool) *corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.1.0.7", PodIPs: []corev1.PodIP{{IP: "10.1.0.7"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
		}
		out, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	created = setPodReady(created, true)
	addresses := func(ready bool) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			ep, err := admin.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, s := range ep.Subsets {
				addrs := s.NotReadyAddresses
				if ready {
					addrs = s.Addresses
				}
				for _, a := range addrs {
					if a.IP == "10.1.0.7" {
						return true, nil
					}
				}
			}
			return false, nil
		}
	}
	eventually(t, "the ready Pod's address in the Service's Endpoints", addresses(true))
	setPodReady(created, false)
	eventually(t, "the unready Pod's address among the not-ready addresses", addresses(false))
	if err := admin.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Endpoints deleted with their Service", func(ctx context.Context) (bool, error) {
		_, err := admin.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
