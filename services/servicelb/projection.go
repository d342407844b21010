package servicelb

import (
	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/shared/informer"
)

// cacheTransform trims objects before they enter the informers' caches. Nodes are cached only
// to keep the eligible node set (eligibleNode), so they keep only what it reads; their images,
// addresses, capacity and conditions are most of their bytes, and every kubelet heartbeat would
// otherwise be held in full. Every other object is read whole and only loses managedFields.
var cacheTransform = informer.Transform(informer.Project(projectNode))

// projectNode keeps the Node's identity, deletion, the exclude-from-balancers label and the
// autoscaler's to-be-deleted taint: all eligibleNode reads. The other binaries that cache
// Nodes keep other fields (each only what it reads), hence a projection per binary.
func projectNode(n *v1.Node) *v1.Node {
	out := &v1.Node{
		TypeMeta:   n.TypeMeta,
		ObjectMeta: informer.KeptMeta(&n.ObjectMeta),
	}
	if v, ok := n.Labels[excludeLabel]; ok {
		out.Labels = map[string]string{excludeLabel: v}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == toBeDeletedTaint {
			out.Spec.Taints = append(out.Spec.Taints, t)
		}
	}
	return out
}
