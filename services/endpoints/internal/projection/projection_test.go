package projection

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/benchkit"
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

// TestCacheBytesPerObject reports (never asserts) the heap bytes one cached object of each type
// this controller watches costs as the apiserver lists it, and after the informer transform:
// go test -run TestCacheBytesPerObject -v. deploy/tests/scale/README.md tabulates them.
func TestCacheBytesPerObject(t *testing.T) {
	benchkit.ReportCacheBytes(t, "endpoints",
		benchkit.Cached{Kind: "Pod", Transform: New().Transform},
		benchkit.Cached{Kind: "Node", Transform: New().Transform},
		benchkit.Cached{Kind: "Service", Transform: New().Transform},
	)
}
