package drills

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestWatchExpiry freezes the endpoints, quota and namespace controllers, deletes objects while
// their watches are stalled, compacts etcd and restarts the apiserver so that the events they
// did not read are gone (their watches get 410 and they relist), then thaws them. Every delete
// made during the gap must be acted on: no orphaned Endpoints, quota usage right, every deleted
// namespace finalized.
// Over 80 lines: the drill's phases (fixtures, catch-up, freeze, deletes in the gap, etcd compacted, thaw, checks) must run in order against one control plane.
func TestWatchExpiry(t *testing.T) {
	testenv.Require(t, env)
	ctx := context.Background()
	c := env.Client(t)
	ns := env.Namespace(t)
	off := "--leader-elect=false" // the gap is about watches, not the Lease

	// endpoints: Services a and b, three ready Pods each.
	for _, svc := range []string{"a", "b"} {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": svc}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		if _, err := c.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", svc, i), Namespace: ns, Labels: map[string]string{"app": svc}},
				Spec: corev1.PodSpec{NodeName: "drill-node", Containers: []corev1.Container{{Name: "c", Image: "web"}}}}
			out, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ip := podIP(len(svc)*10 + int(svc[0]) + i)
			out.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
			if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// quota: ten ConfigMaps counted.
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse("100")}}}
	if _, err := c.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: ns}}
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// namespace: five namespaces with content, to be deleted during the gap.
	var doomed []string
	for i := range 5 {
		name := fmt.Sprintf("%s-gone-%d", ns, i)
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "content", Namespace: name}}
		if _, err := c.CoreV1().ConfigMaps(name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		doomed = append(doomed, name)
	}

	procs := []*testenv.Controller{
		env.Start(t, bin("endpoints-controller", "endpoints"), "endpoints", off),
		env.Start(t, bin("quota-controller", "quota"), "quota", off),
		env.Start(t, bin("namespace-controller", "namespace"), "namespace", off),
	}
	poll := func(what string, cond func(context.Context) (bool, error)) time.Duration {
		t.Helper()
		start := time.Now()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return time.Since(start)
	}
	endpointIPs := func(ctx context.Context, name string) (int, error) {
		ep, err := c.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return -1, nil
		} else if err != nil {
			return 0, err
		}
		n := 0
		for _, s := range ep.Subsets {
			n += len(s.Addresses)
		}
		return n, nil
	}
	quotaUsed := func(ctx context.Context) (int64, error) {
		q, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		u := q.Status.Used["count/configmaps"]
		return u.Value(), nil
	}
	poll("controllers caught up before the gap", func(ctx context.Context) (bool, error) {
		a, err := endpointIPs(ctx, "a")
		if err != nil {
			return false, err
		}
		b, err := endpointIPs(ctx, "b")
		if err != nil {
			return false, err
		}
		used, err := quotaUsed(ctx)
		return a == 3 && b == 3 && used == 10, err
	})

	for _, p := range procs {
		if err := p.Freeze(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CoreV1().Services(ns).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []string{"a-0", "a-1"} {
		if err := c.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 7 {
		if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, fmt.Sprintf("cm-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range doomed {
		if err := c.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rev := env.ExpireWatches(t)
	thawed := time.Now()
	for _, p := range procs {
		if err := p.Thaw(); err != nil {
			t.Fatal(err)
		}
	}

	poll("Endpoints of the Service deleted during the gap removed, and the deleted Pods gone from the other", func(ctx context.Context) (bool, error) {
		a, err := endpointIPs(ctx, "a")
		if err != nil {
			return false, err
		}
		b, err := endpointIPs(ctx, "b")
		return a == 1 && b == -1, err
	})
	endpointsAt := time.Since(thawed)
	poll("quota usage after 7 of 10 ConfigMaps were deleted during the gap", func(ctx context.Context) (bool, error) {
		used, err := quotaUsed(ctx)
		return used == 3, err
	})
	quotaAt := time.Since(thawed)
	poll("namespaces deleted during the gap finalized", func(ctx context.Context) (bool, error) {
		for _, name := range doomed {
			if _, err := c.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	namespacesAt := time.Since(thawed)
	for _, p := range procs {
		if p.Exited() {
			t.Errorf("%s exited (%d)", p.Name, p.ExitCode())
		}
	}
	since := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	report(t, "watch expiry (etcd compacted to "+fmt.Sprint(rev)+", apiserver restarted while frozen)", "endpoints, quota, namespace",
		fmt.Sprintf("all deletes of the gap acted on; measured from the thaw: Endpoints right %s, quota right %s, namespaces finalized %s",
			since(endpointsAt), since(quotaAt), since(namespacesAt)))
}
