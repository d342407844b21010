package chart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestChartPodsOutliveANoExecuteTaint: a NoExecute taint on the node that runs the controllers
// (an operator's, or the conformance spec "evicts pods with minTolerationSeconds", which taints
// the node its Pods run on) must not make nodelifecycle-controller's taint eviction evict the
// controllers themselves, its own Pod among them: kube-controller-manager, a static Pod, is
// immune. The chart's Pods tolerate such a taint for defaults.noExecuteTolerationSeconds, and no
// longer (a node that stays tainted still loses them).
//
// A real nodelifecycle-controller on the real apiserver, one heartbeating Node, and on it: a Pod
// of every Deployment the chart renders by default (their tolerations), one of a rendering with
// the toleration at 15 s, and a control Pod tolerating the taint for 5 s. The taint goes on; the
// test waits for the control Pod and the 15 s Pod to be evicted (both final states), then
// checks that every default Pod is still there.
// Over 80 lines: the Node and its heartbeat, the Pods of two renderings and a control, then the taint and the checks.
func TestChartPodsOutliveANoExecuteTaint(t *testing.T) {
	if env == nil {
		t.Skip("needs the real control plane (not with -short)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := env.Client(t)
	c, v := chart(t)
	ns := env.Namespace(t)
	node := "tainted-" + ns[len(ns)-6:]
	const taintKey = "kcm-split.io/e2e-evict-taint-key"

	// The Pods as the chart renders them: every controller, the defaults.
	var all []string
	for _, alias := range v.Aliases() {
		all = append(all, "--set", "controllers."+alias+".enabled=true")
	}
	type rendered struct {
		name string
		spec corev1.PodSpec
	}
	var defaults []rendered
	for _, o := range render(t, c, "kcm-split", ns, all...) {
		if d, ok := o.Typed.(*appsv1.Deployment); ok {
			defaults = append(defaults, rendered{d.Name, d.Spec.Template.Spec})
		}
	}
	if len(defaults) != len(v.Aliases()) {
		t.Fatalf("rendered %d Deployments for %d controllers", len(defaults), len(v.Aliases()))
	}
	short := deploymentOf(t, render(t, c, "kcm-split", ns, append(v.Only("nodelifecycle"), "--set", "defaults.noExecuteTolerationSeconds=15")...),
		"kcm-split-nodelifecycle-controller")

	// A Node whose kubelet posts Ready and renews its Lease, so that nothing but the test's
	// taint is on it.
	created, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	now := metav1.Now()
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: now, LastTransitionTime: now, Reason: "KubeletReady"}}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: ptr(int32(40)), RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	if _, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.Background(), node, metav1.DeleteOptions{})
	})
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{}); err == nil {
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				_, _ = admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
			}
		}
	}()

	bin := buildBinary(t, "nodelifecycle", "nodelifecycle-controller")
	ctrl := env.StartController(t, bin, "nodelifecycle-controller", "--leader-elect-resource-namespace="+ns,
		"--node-monitor-period=1s", "--node-monitor-grace-period=20s")
	ctrl.WaitLeadingAndSynced("nodelifecycle-controller", testenv.LeadTimeout)

	pod := func(name string, tolerations []corev1.Toleration) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				NodeName:    node,
				Containers:  []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
				Tolerations: tolerations,
			},
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range defaults {
		pod(r.name, r.spec.Tolerations)
	}
	pod("toleration-15s", short.Spec.Template.Spec.Tolerations)
	pod("control-5s", []corev1.Toleration{{Key: taintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(5))}})

	tainted := time.Now()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: taintKey, Value: "evictTaintVal", Effect: corev1.TaintEffectNoExecute})
		_, err = admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	gone := func(name string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil), nil
		}
	}
	eventually(t, "the control Pod (5 s) evicted", gone("control-5s"))
	eventually(t, "the Pod of the chart rendered with noExecuteTolerationSeconds=15 evicted", gone("toleration-15s"))
	t.Logf("control Pod and 15 s Pod evicted %.1fs after the taint", time.Since(tainted).Seconds())

	var evicted []string
	for _, r := range defaults {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, r.name, metav1.GetOptions{})
		switch {
		case err != nil:
			evicted = append(evicted, fmt.Sprintf("%s (%v)", r.name, err))
		case p.DeletionTimestamp != nil:
			evicted = append(evicted, r.name+" (terminating)")
		}
	}
	if len(evicted) > 0 {
		t.Fatalf("the chart's own Pods were evicted by a NoExecute taint of their node, within %.0fs: %s",
			time.Since(tainted).Seconds(), strings.Join(evicted, ", "))
	}
}
