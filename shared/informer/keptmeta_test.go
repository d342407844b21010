package informer

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestKeptMeta(t *testing.T) {
	created, deleted := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	grace := int64(30)
	in := metav1.ObjectMeta{
		Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "42", Generation: 3,
		CreationTimestamp: created, DeletionTimestamp: &deleted, DeletionGracePeriodSeconds: &grace,
		Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"},
		OwnerReferences: []metav1.OwnerReference{{Name: "rs"}}, Finalizers: []string{"f"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}, GenerateName: "p-",
	}
	got := KeptMeta(&in)
	want := metav1.ObjectMeta{
		Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "42",
		CreationTimestamp: created, DeletionTimestamp: &deleted, DeletionGracePeriodSeconds: &grace,
	}
	if got.String() != want.String() {
		t.Fatalf("KeptMeta = %s\nwant %s", got.String(), want.String())
	}
}
