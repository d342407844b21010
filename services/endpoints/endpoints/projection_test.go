package endpoints

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/projection"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
)

// TestProjectedPodsGiveTheSameEndpoints is the contract of the cache projection: whatever the
// controller computes from a full Pod it computes identically from the projected one.
func TestProjectedPodsGiveTheSameEndpoints(t *testing.T) {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []v1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: v1.ProtocolTCP},
			{Name: "admin", Port: 9901, TargetPort: intstr.FromString("admin"), Protocol: v1.ProtocolTCP},
		}},
	}
	full := []*v1.Pod{testobj.RichPod("a", "10.0.0.1", true), testobj.RichPod("b", "10.0.0.2", false)}
	deleting := testobj.RichPod("c", "10.0.0.3", true)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1700000100, 0)}
	full = append(full, deleting)

	projected := make([]*v1.Pod, len(full))
	for i, p := range full {
		out, err := projection.New().Transform(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		projected[i] = out.(*v1.Pod)
	}
	for _, publish := range []bool{false, true} {
		s := svc.DeepCopy()
		s.Spec.PublishNotReadyAddresses = publish
		want, got := desiredSubsets(s, full), desiredSubsets(s, projected)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("publishNotReady=%v: subsets differ (-full +projected):\n%s", publish, diff)
		}
		if len(want) == 0 {
			t.Fatal("fixture produced no subsets; the comparison proves nothing")
		}
	}
	if projected[0].Annotations != nil || projected[0].Spec.Containers[0].Env != nil || projected[0].ManagedFields != nil ||
		len(projected[0].Status.Conditions) != 1 || projected[0].Status.Conditions[0].Type != v1.PodReady {
		t.Fatal("projection kept fields the controller never reads")
	}
}
