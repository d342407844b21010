package nodelifecycle

import (
	"testing"

	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/benchkit"
)

// The cache transform keeps every field this controller reads and drops the rest.
func TestCacheTransformKeepsWhatIsRead(t *testing.T) {
	now := metav1.Now()
	pod := benchkit.RealisticPod("shop", "web-1", "web", "node-1", "10.0.0.9")
	benchkit.WithManagedFields(&pod.ObjectMeta)
	pod.DeletionTimestamp = &now
	got, err := cacheTransform(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*v1.Pod)
	if p.Name != pod.Name || p.Namespace != pod.Namespace || p.UID != pod.UID || p.DeletionTimestamp == nil ||
		p.Spec.NodeName != "node-1" || len(p.Spec.Tolerations) != 2 || p.Status.Phase != v1.PodRunning || len(p.Status.Conditions) != len(pod.Status.Conditions) {
		t.Errorf("Pod lost a field the controller reads: %+v", p)
	}
	if p.ManagedFields != nil || p.Labels != nil || p.Annotations != nil || p.Spec.Containers != nil || p.Spec.Volumes != nil || p.Status.ContainerStatuses != nil || p.OwnerReferences != nil {
		t.Errorf("Pod kept a field the controller never reads: %+v", p)
	}

	node := benchkit.RealisticNode("node-1", "zone-a")
	benchkit.WithManagedFields(&node.ObjectMeta)
	node.Spec.Taints = []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoSchedule}}
	node.Spec.PodCIDR, node.Spec.PodCIDRs = "10.1.0.0/24", []string{"10.1.0.0/24"}
	got, err = cacheTransform(node)
	if err != nil {
		t.Fatal(err)
	}
	n := got.(*v1.Node)
	if n.Name != "node-1" || n.Labels[v1.LabelTopologyZone] != "zone-a" || len(n.Spec.Taints) != 1 || n.Spec.PodCIDR == "" || len(n.Spec.PodCIDRs) != 1 ||
		len(n.Status.Conditions) != len(node.Status.Conditions) || n.CreationTimestamp != node.CreationTimestamp {
		t.Errorf("Node lost a field the controller reads: %+v", n)
	}
	if n.ManagedFields != nil || n.Status.Images != nil || n.Status.Addresses != nil || n.Annotations != nil {
		t.Errorf("Node kept a field the controller never reads: %+v", n)
	}

	holder := "node-1"
	lease := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: "kube-node-lease", Labels: map[string]string{"a": "b"}},
		Spec: coordv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &metav1.MicroTime{Time: now.Time}}}
	benchkit.WithManagedFields(&lease.ObjectMeta)
	got, err = cacheTransform(lease)
	if err != nil {
		t.Fatal(err)
	}
	l := got.(*coordv1.Lease)
	if l.Name != "node-1" || l.Spec.RenewTime == nil || l.ManagedFields != nil || l.Labels != nil || l.Spec.HolderIdentity != nil {
		t.Errorf("Lease projection: %+v", l)
	}

	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	benchkit.WithManagedFields(&ns.ObjectMeta)
	got, _ = cacheTransform(ns)
	if got.(*v1.Namespace).ManagedFields != nil || got.(*v1.Namespace).Name != "shop" {
		t.Errorf("other objects lose only managedFields: %+v", got)
	}
}

// TestCacheBytesPerObject reports (never asserts) the heap bytes one cached object of each type
// this controller watches costs as the apiserver lists it, and after the informer transform:
// go test -run TestCacheBytesPerObject -v. deploy/tests/scale/README.md tabulates them.
func TestCacheBytesPerObject(t *testing.T) {
	benchkit.ReportCacheBytes(t, "nodelifecycle",
		benchkit.Cached{Kind: "Pod", Transform: cacheTransform},
		benchkit.Cached{Kind: "Node", Transform: cacheTransform},
	)
}
