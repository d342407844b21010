package projection

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTransformDropsManagedFieldsOfOtherObjects(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := New().Transform(svc)
	if err != nil {
		t.Fatal(err)
	}
	if out.(*v1.Service).ManagedFields != nil {
		t.Fatal("managedFields kept")
	}
}
