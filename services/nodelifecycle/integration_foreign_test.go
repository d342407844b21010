package nodelifecycle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/services/nodelifecycle"
	"github.com/kcm-split/kcm-split/shared/foreign"
)

const (
	foreignCounter = `kcm_split_foreign_writer_detected_total{controller="` + nodelifecycle.Name + `"}`
	// kcm is the field manager of a kube-controller-manager left running.
	kcm = "kube-controller-manager"
)

// foreignEvents lists the ForeignWriterDetected Events of the Nodes named prefix-*.
func foreignEvents(t *testing.T, c kubernetes.Interface, prefix string) []corev1.Event {
	t.Helper()
	evs, err := c.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + foreign.Reason})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "Node" && strings.HasPrefix(e.InvolvedObject.Name, prefix+"-") {
			out = append(out, e)
		}
	}
	return out
}

// asKCM writes a Node (spec, or status with status) as kube-controller-manager does.
func asKCM(t *testing.T, c kubernetes.Interface, name string, status bool, edit func(*corev1.Node)) {
	t.Helper()
	ctx := context.Background()
	err := retryConflict(func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(n)
		if status {
			_, err = c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{FieldManager: kcm})
		} else {
			_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: kcm})
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// foreignStart starts the controller on three Ready Nodes, one of which falls silent: its
// conditions marked Unknown and its taints are this controller's own writes, never reported.
func foreignStart(t *testing.T, prefix string) (kubernetes.Interface, func(string) float64, []string) {
	t.Helper()
	client := env.Client(t)
	k := newKubelets(t)
	nodes := []string{prefix + "-a", prefix + "-b", prefix + "-c"}
	for _, n := range nodes {
		k.addNode(n, "zone-"+prefix)
	}
	// An episode a test before left beside the Lease would be taken over by this controller, as
	// a new Lease holder should take it over (shared/foreign's keep): each test starts without.
	episodes := func() {
		err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Delete(context.Background(), nodelifecycle.ControllerID+foreign.EpisodesSuffix, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	episodes()
	t.Cleanup(episodes)
	ctl := env.StartLeading(t, controller, "ctl", shortTimings...)
	if got := ctl.Metric(foreignCounter); got != 0 {
		t.Fatalf("%s = %v at start, want 0", foreignCounter, got)
	}
	waitNodes(t, client, slack, "the admission not-ready taint lifted", isReadyClean, nodes...)
	k.stop(nodes[2])
	waitNodes(t, client, grace+monitorPeriod+slack, "the silent node Unknown and tainted", func(n *corev1.Node) bool {
		return isUnreachable(n) && hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
	}, nodes[2])
	if got, evs := ctl.Metric(foreignCounter), foreignEvents(t, client, prefix); got != 0 || len(evs) != 0 {
		t.Fatalf("the controller's own writes reported: %s = %v, %d Events", foreignCounter, got, len(evs))
	}
	return client, ctl.Metric, nodes
}

// waitOneReport waits for the counter at 1 and one Event naming kube-controller-manager on
// node, then checks that a second write of the same episode adds neither.
func waitOneReport(t *testing.T, client kubernetes.Interface, metric func(string) float64, prefix, node string, again func()) {
	t.Helper()
	var evs []corev1.Event
	waitFor(t, slack, "the foreign write reported", func() bool {
		evs = foreignEvents(t, client, prefix)
		return len(evs) > 0 && metric(foreignCounter) == 1
	})
	if len(evs) != 1 || evs[0].InvolvedObject.Name != node || !strings.Contains(evs[0].Message, kcm) {
		t.Fatalf("Events %+v, want one on %s naming %s", evs, node, kcm)
	}
	again()
	time.Sleep(3 * monitorPeriod)
	if got, evs := metric(foreignCounter), foreignEvents(t, client, prefix); got != 1 || len(evs) != 1 || evs[0].Count > 1 {
		t.Fatalf("a second write of the episode reported again: %s = %v, %d Events", foreignCounter, got, len(evs))
	}
}

// TestForeignTaintWriterReported (issue 49, point 4): kube-controller-manager's node
// lifecycle controller left running taints a healthy Node unreachable: reported once for
// the episode; this controller's own taints are not.
func TestForeignTaintWriterReported(t *testing.T) {
	requireEnv(t)
	client, metric, nodes := foreignStart(t, "fw-taint")
	taint := func(key string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	asKCM(t, client, nodes[0], false, taint(corev1.TaintNodeUnreachable))
	waitOneReport(t, client, metric, "fw-taint", nodes[0], func() { asKCM(t, client, nodes[1], false, taint(corev1.TaintNodeMemoryPressure)) })
}

// TestForeignConditionWriterReported (issue 49, point 4): kube-controller-manager marks a
// Node's Ready condition Unknown as if its kubelet were silent: reported once for the
// episode; this controller's own marking is not.
func TestForeignConditionWriterReported(t *testing.T) {
	requireEnv(t)
	client, metric, nodes := foreignStart(t, "fw-cond")
	unknown := func(n *corev1.Node) {
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = corev1.ConditionUnknown
				n.Status.Conditions[i].Reason = "NodeStatusUnknown"
			}
		}
	}
	asKCM(t, client, nodes[0], true, unknown)
	waitOneReport(t, client, metric, "fw-cond", nodes[0], func() { asKCM(t, client, nodes[1], true, unknown) })
}
