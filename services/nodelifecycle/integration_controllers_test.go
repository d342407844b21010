package nodelifecycle_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// With --controllers=taint-eviction-controller the binary runs taint-eviction-controller
// alone: a Pod that does not tolerate a NoExecute taint is evicted, while the NoSchedule
// not-ready taint the apiserver put on the new, Ready Node stays (node-lifecycle-controller
// would have lifted it on its first sync of the Node, before the eviction).
func TestControllersRunsOnlyTheNamed(t *testing.T) {
	requireEnv(t)
	client := env.Client(t)
	ns := env.Namespace(t)
	k := newKubelets(t)
	node := "controllers-eviction-only"
	k.addNode(node, "zone-controllers")
	if !hasTaint(getNode(t, client, node), corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule) {
		t.Fatalf("node %s was created without the apiserver's not-ready NoSchedule taint: the test's sentinel is missing", node)
	}
	env.StartLeading(t, controller, "ctl", append([]string{"--controllers=taint-eviction-controller"}, shortTimings...)...)
	// The Pod first, its status written while nothing evicts it yet: created after the
	// NoExecute taint, the controller's DisruptionTarget condition could come between the
	// create and the status write, which then conflicts (seen in CI).
	createPod(t, client, makePod(ns, "intolerant", node))

	err := retryConflict(func() error {
		n := getNode(t, client, node)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/drained", Effect: corev1.TaintEffectNoExecute})
		_, err := client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("tainting node %s: %v", node, err)
	}
	waitFor(t, slack, "the Pod that does not tolerate the NoExecute taint evicted", func() bool { return evicted(client, ns, "intolerant") })

	if n := getNode(t, client, node); !hasTaint(n, corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule) {
		t.Errorf("node %s lost its not-ready NoSchedule taint (taints %v): node-lifecycle-controller ran", node, n.Spec.Taints)
	}
}
