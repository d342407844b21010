package nodelifecycle

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// The node queue's sync writes a Node's beta labels once, with the resourceVersion it read,
// and nothing when they are in line.
func TestSyncWritesBetaLabelsOnce(t *testing.T) {
	n := readyNode("a", "z")
	n.Labels[v1.LabelOSStable] = "linux"
	n.Labels[v1.LabelArchStable] = "amd64"
	stored := syncOnceThenIdle(t, newFixture(t, fastOptions(), n), "a")
	if stored.Labels["beta.kubernetes.io/os"] != "linux" || stored.Labels["beta.kubernetes.io/arch"] != "amd64" || stored.Labels[v1.LabelTopologyZone] != "z" {
		t.Errorf("labels after the sync: %v", stored.Labels)
	}
}

// syncOnceThenIdle runs the node queue's sync of name twice and requires one patch of the
// Node from the first and no write from the second (the Node is then in line); it returns
// the Node as stored after the first.
func syncOnceThenIdle(t *testing.T, f *fixture, name string) *v1.Node {
	t.Helper()
	ctx := context.Background()
	if err := f.c.syncNode(ctx, name); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 1 || w[0] != "patch nodes "+name {
		t.Fatalf("writes %v, want one patch of %s", w, name)
	}
	stored := f.stored(name)
	f.refresh()
	f.client.ClearActions()
	if err := f.c.syncNode(ctx, name); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes with the Node in line: %v", w)
	}
	return stored
}

// A Node as it comes out of registration (the admission's not-ready NoSchedule taint, stable
// os/arch labels only) is brought in line by one write, not one per concern: a controller
// starting over a whole cluster would otherwise spend twice its client budget.
func TestSyncFreshNodeInOneWrite(t *testing.T) {
	n := readyNode("a", "z")
	n.Labels[v1.LabelOSStable] = "linux"
	n.Labels[v1.LabelArchStable] = "amd64"
	n.Spec.Taints = []v1.Taint{{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule}, {Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}}
	stored := syncOnceThenIdle(t, newFixture(t, fastOptions(), n), "a")
	if want := []v1.Taint{{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}}; !equality.Semantic.DeepEqual(stored.Spec.Taints, want) {
		t.Errorf("taints after the sync: %v, want %v", stored.Spec.Taints, want)
	}
	if stored.Labels["beta.kubernetes.io/os"] != "linux" || stored.Labels["beta.kubernetes.io/arch"] != "amd64" || stored.Labels[v1.LabelOSStable] != "linux" {
		t.Errorf("labels after the sync: %v", stored.Labels)
	}
}
