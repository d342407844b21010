package nodelifecycle_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Under `make up` kwok plays the kubelets: it renews each Node's Lease and almost never
// posts status. With kwok v0.8 and the stages make up uses, a Node must lose the admission
// not-ready taint and stay Ready on its Lease alone, well past the grace period. Skipped when
// `make tools` has not built kwok.
func TestKwokNodesStayHealthy(t *testing.T) {
	requireEnv(t)
	if err := testenv.KwokBuilt(); err != nil {
		t.Skip(err)
	}
	client := env.Client(t)
	// A 20 s Lease, renewed every 5 s (a quarter, as kubelets and kwok do).
	env.StartKwok(t, testenv.Kwok{Manage: "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", LeaseSeconds: 20})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node", Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		Labels: map[string]string{corev1.LabelTopologyRegion: "r", corev1.LabelTopologyZone: "zone-kwok"}}}
	if _, err := client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })

	const kwokGrace = 12 * time.Second
	env.StartLeading(t, controller, "ctl", "--node-monitor-period=1s", "--node-monitor-grace-period="+kwokGrace.String())
	waitNodes(t, client, slack, "the kwok node Ready without the admission taint", isReadyClean, node.Name)
	heartbeat := readyOf(getNode(t, client, node.Name)).LastHeartbeatTime
	time.Sleep(2 * kwokGrace)
	n := getNode(t, client, node.Name)
	if !isReadyClean(n) {
		t.Fatalf("kwok node after twice the grace period: ready %+v, taints %+v", readyOf(n), n.Spec.Taints)
	}
	if hb := readyOf(n).LastHeartbeatTime; !hb.Equal(&heartbeat) {
		t.Logf("kwok posted status meanwhile (heartbeat %s -> %s): the Lease was not the only sign of life", heartbeat, hb)
	}
}
