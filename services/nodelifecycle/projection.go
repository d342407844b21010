package nodelifecycle

import (
	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/informer"
)

// cacheTransform trims objects before they enter the informers' caches. Every write this
// controller makes is a patch of the fields it owns (taints, conditions), never an update
// of a cached object, so the caches need only what the controller reads.
// The projections are this binary's own: servicelb, pvbinder and endpoints cache other
// fields of Pods and Nodes, each only what it reads.
var cacheTransform = informer.Transform(informer.Project(projectPod), informer.Project(projectNode), informer.Project(projectLease))

// projectLease keeps a Node Lease's identity and its renew time: the heartbeat is all this
// controller reads of it.
func projectLease(l *coordv1.Lease) *coordv1.Lease {
	return &coordv1.Lease{
		TypeMeta:   l.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, UID: l.UID, ResourceVersion: l.ResourceVersion},
		Spec:       coordv1.LeaseSpec{RenewTime: l.Spec.RenewTime},
	}
}

// projectPod keeps identity and deletion, the Node and tolerations for eviction, and the
// conditions for readiness.
func projectPod(pod *v1.Pod) *v1.Pod {
	return &v1.Pod{
		TypeMeta:   pod.TypeMeta,
		ObjectMeta: informer.KeptMeta(&pod.ObjectMeta),
		Spec:       v1.PodSpec{NodeName: pod.Spec.NodeName, Tolerations: pod.Spec.Tolerations},
		Status: v1.PodStatus{
			Phase:      pod.Status.Phase,
			Conditions: pod.Status.Conditions,
		},
	}
}

// projectNode drops what a kubelet reports but this controller never reads; the image
// list alone is often most of a Node's size. The Pod ranges stay for node IPAM.
func projectNode(node *v1.Node) *v1.Node {
	meta := informer.KeptMeta(&node.ObjectMeta)
	meta.Labels = node.Labels
	return &v1.Node{
		TypeMeta:   node.TypeMeta,
		ObjectMeta: meta,
		Spec: v1.NodeSpec{Unschedulable: node.Spec.Unschedulable, Taints: node.Spec.Taints,
			PodCIDR: node.Spec.PodCIDR, PodCIDRs: node.Spec.PodCIDRs},
		Status: v1.NodeStatus{Conditions: node.Status.Conditions},
	}
}
