package namespace

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/shared/benchkit"
	"github.com/kcm-split/kcm-split/shared/informer"
)

// TestCacheBytesPerObject reports (never asserts) the heap bytes one cached object of each type
// this controller watches costs as the apiserver lists it, and after the informer transform:
// go test -run TestCacheBytesPerObject -v. deploy/scale/README.md tabulates them.
func TestCacheBytesPerObject(t *testing.T) {
	pod := benchkit.RealisticPod("shop", "web-7d9f8b6c5d-abcde", "web", "node-00001", "10.64.0.1")
	benchkit.WithManagedFields(&pod.ObjectMeta)
	node := benchkit.RealisticNode("node-00001", "zone-a")
	benchkit.WithManagedFields(&node.ObjectMeta)
	svc := benchkit.RealisticService("shop", "web")
	benchkit.WithManagedFields(&svc.ObjectMeta)
	ns := &corev1.Namespace{}
	ns.Name = "shop"
	ns.Labels = map[string]string{"team": "payments", "kubernetes.io/metadata.name": "shop"}
	benchkit.WithManagedFields(&ns.ObjectMeta)
	const n = 2000
	report := func(kind string, full, kept float64, err error) {
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("namespace %-10s full %6.0f B  cached %6.0f B  (%.2fx)", kind, full, kept, kept/full)
	}
	measure := func(kind string, full func() (float64, error), kept func() (float64, error)) {
		f, err1 := full()
		k, err2 := kept()
		if err1 != nil {
			err2 = err1
		}
		report(kind, f, k, err2)
	}
	measure("Namespace", func() (float64, error) {
		return benchkit.CacheBytes(n, ns, func() *corev1.Namespace { return &corev1.Namespace{} }, nil)
	},
		func() (float64, error) {
			return benchkit.CacheBytes(n, ns, func() *corev1.Namespace { return &corev1.Namespace{} }, informer.DropManagedFields)
		})
	_, _, _ = pod, node, svc
}
