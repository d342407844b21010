package servicelb

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/benchkit"
)

// The projection must not change which Nodes are eligible.
func TestProjectNodeKeepsEligibility(t *testing.T) {
	now := metav1.Now()
	base := func() *v1.Node {
		return &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7",
				Labels: map[string]string{"topology.kubernetes.io/zone": "a", "kubernetes.io/hostname": "n1"}},
			Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: v1.TaintEffectNoSchedule}}},
			Status: v1.NodeStatus{
				Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
				Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}},
			},
		}
	}
	cases := map[string]func(*v1.Node){
		"plain":                    func(*v1.Node) {},
		"deleting":                 func(n *v1.Node) { n.DeletionTimestamp = &now },
		"excluded":                 func(n *v1.Node) { n.Labels[excludeLabel] = "" },
		"excluded true":            func(n *v1.Node) { n.Labels[excludeLabel] = "true" },
		"exclude label false":      func(n *v1.Node) { n.Labels[excludeLabel] = "false" },
		"exclude label not a bool": func(n *v1.Node) { n.Labels[excludeLabel] = "yes" },
		"autoscaler removes it": func(n *v1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: toBeDeletedTaint, Effect: v1.TaintEffectNoSchedule})
		},
		"not ready is still a host":   func(n *v1.Node) { n.Status.Conditions[0].Status = v1.ConditionFalse },
		"no labels, no taints at all": func(n *v1.Node) { n.Labels, n.Spec.Taints = nil, nil },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			n := base()
			mutate(n)
			p := projectNode(n)
			if got, want := eligibleNode(p), eligibleNode(n); got != want {
				t.Fatalf("eligibleNode(projected) = %v, on the whole Node %v", got, want)
			}
			if p.Name != n.Name || p.ResourceVersion != n.ResourceVersion || p.UID != n.UID {
				t.Fatalf("identity lost: %+v", p.ObjectMeta)
			}
			if len(p.Status.Addresses) != 0 || len(p.Status.Conditions) != 0 {
				t.Fatalf("status kept: %+v", p.Status)
			}
		})
	}
}

// The transform hands Nodes to projectNode and takes only managedFields off everything else.
func TestCacheTransformRoutesByType(t *testing.T) {
	node := benchkit.RealisticNode("n1", "zone-a")
	benchkit.WithManagedFields(&node.ObjectMeta)
	got, err := cacheTransform(node)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, projectNode(node)) {
		t.Errorf("Node: got %+v, want projectNode's %+v", got, projectNode(node))
	}
	svc := benchkit.RealisticService("shop", "web")
	benchkit.WithManagedFields(&svc.ObjectMeta)
	want := svc.DeepCopy()
	want.ManagedFields = nil
	if got, _ := cacheTransform(svc); !reflect.DeepEqual(got, want) {
		t.Errorf("Service: got %+v, want it whole but for managedFields", got)
	}
}

// TestCacheBytesPerObject reports (never asserts) what one cached Node and Service cost:
// go test -run TestCacheBytesPerObject -v. deploy/tests/scale/README.md tabulates them.
func TestCacheBytesPerObject(t *testing.T) {
	benchkit.ReportCacheBytes(t, "servicelb",
		benchkit.Cached{Kind: "Node", Transform: cacheTransform},
		benchkit.Cached{Kind: "Service", Transform: cacheTransform},
	)
}
