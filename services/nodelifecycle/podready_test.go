package nodelifecycle

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A Pod on an unreachable Node is marked not Ready with one patch pinned to its UID; a Pod
// not Ready already costs nothing.
func TestMarkPodsNotReady(t *testing.T) {
	ctx := context.Background()
	pod := func(name string, ready v1.ConditionStatus) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("u-" + name)},
			Spec:   v1.PodSpec{NodeName: "n"},
			Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: ready}}}}
	}
	f := newFixture(t, fastOptions(), pod("ready", v1.ConditionTrue), pod("notready", v1.ConditionFalse))
	if err := f.c.markPodsNotReady(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 1 || w[0] != "patch pods/status ready" {
		t.Errorf("writes = %v", w)
	}
	p, _ := f.client.CoreV1().Pods("ns").Get(ctx, "ready", metav1.GetOptions{})
	if p.Status.Conditions[0].Status != v1.ConditionFalse {
		t.Errorf("pod conditions = %+v", p.Status.Conditions)
	}
	if !hasEvent(f.events(), "NodeNotReady Node is not ready") {
		t.Error("no NodeNotReady event on the pod")
	}
}
