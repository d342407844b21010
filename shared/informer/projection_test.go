package informer

import (
	"reflect"
	"testing"

	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestTransform(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationApply}}
	keepPodName := func(p *v1.Pod) *v1.Pod { return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name}} }
	keepNodeName := func(n *v1.Node) *v1.Node { return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}} }
	transform := Transform(Project(keepPodName), Project(keepNodeName))

	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}, ManagedFields: managed}}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: managed}, Spec: v1.NodeSpec{PodCIDR: "10.0.0.0/24"}}
	lease := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Labels: map[string]string{"a": "b"}, ManagedFields: managed}}
	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}

	for _, c := range []struct {
		name     string
		in, want any
		same     bool // the object itself comes back, not a copy
	}{
		{"a Pod goes to its projection", pod, keepPodName(pod), false},
		{"a Node goes to its projection", node, keepNodeName(node), false},
		{"another type loses managedFields only", lease,
			&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Labels: map[string]string{"a": "b"}}}, true},
		{"what has no metadata passes unchanged", tombstone, tombstone, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := transform(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %#v, want %#v", got, c.want)
			}
			if c.same && got != c.in {
				t.Error("got a copy, want the object itself")
			}
		})
	}

	// With no projection, Transform is DropManagedFields.
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: managed}}
	if got, _ := Transform()(svc); got.(*v1.Service).ManagedFields != nil || got.(*v1.Service).Name != "s" {
		t.Errorf("Transform() kept managedFields: %#v", got)
	}
}
