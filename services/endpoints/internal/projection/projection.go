// Package projection is the binary's informer transform (Projection.Transform): what each cached object
// keeps of what the API server sends. The three controllers share one informer per type, so
// they share one projection: Pods keep what the Endpoints and EndpointSlice controllers read
// of them, Nodes what the EndpointSlice controller's topology reads, and every other object
// (Services, Endpoints, EndpointSlices, which the mirroring controller copies whole) loses
// only its managedFields. Each controller's package tests that it computes the same from
// projected objects as from full ones.
package projection

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/informer"
)

// Projection is one term's projection: its Pods share equal label sets and port layouts.
// A term builds its own (New), so nothing of a past term's caches outlives it.
type Projection struct {
	interned interners
	observe  func(obj any)
	project  cache.TransformFunc
}

// Observe has fn see every object as the API server sent it, managedFields included, before
// it is projected: the foreign-writer detector reads who wrote it there. Call it before the
// informers start.
func (p *Projection) Observe(fn func(obj any)) { p.observe = fn }

// New returns an empty projection.
func New() *Projection {
	p := &Projection{interned: interners{
		labels: informer.NewInterner[map[string]string](internLimit),
		ports:  informer.NewInterner[projectedPorts](internLimit),
	}}
	p.project = informer.Transform(informer.Project(p.projectPod), informer.Project(projectNode))
	return p
}

// Transform trims objects before they enter the informers' caches. Pods are by far the
// largest population, and real Pod specs (env, volumes, probes, annotations such as
// last-applied-configuration) are mostly bytes this controller never reads; keeping only the
// fields below cuts a Pod to a few hundred bytes. Every other object only loses managedFields.
func (p *Projection) Transform(obj any) (any, error) {
	if p.observe != nil {
		p.observe(obj)
	}
	return p.project(obj)
}

// nodeLabels are the Node labels the EndpointSlice controller reads: the zone for each
// endpoint and for topology hints, and the roles that keep a Node out of the zones' capacity.
var nodeLabels = []string{v1.LabelTopologyZone, "node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}

// projectNode returns the part of node the k8s.io/endpointslice Reconciler and topology
// cache read: the labels above, the Ready condition and the allocatable CPU. Nodes' images,
// addresses and heartbeat times are most of their bytes and none of this controller's
// business. servicelb and nodelifecycle keep other Node fields: each binary caches only what
// it reads.
func projectNode(node *v1.Node) *v1.Node {
	out := &v1.Node{
		TypeMeta:   node.TypeMeta,
		ObjectMeta: informer.KeptMeta(&node.ObjectMeta),
	}
	for _, k := range nodeLabels {
		if v, ok := node.Labels[k]; ok {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[k] = v
		}
	}
	if cpu, ok := node.Status.Allocatable[v1.ResourceCPU]; ok {
		out.Status.Allocatable = v1.ResourceList{v1.ResourceCPU: cpu}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			out.Status.Conditions = []v1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return out
}

// projectPod returns the part of pod the endpoints controller reads: identity, labels and
// deletion for mapping and filtering; node, hostname and subdomain for addresses; container
// ports (and the restart policy that makes an init container a sidecar) for named target
// ports; phase, IPs and the Ready condition for readiness. These are also all the Pod fields the
// k8s.io/endpointslice functions used here read (inclusion, hostname, port lookup, readiness,
// and the Ready condition's lastTransitionTime for the trigger time), its Reconciler included
// (name, namespace and UID for targetRef, nodeName, hostname and subdomain, IPs, readiness,
// deletion for the serving and terminating conditions); none needed adding.
func (p *Projection) projectPod(pod *v1.Pod) *v1.Pod {
	containers, initContainers := p.projectContainers(pod)
	podIP := pod.Status.PodIP
	if len(pod.Status.PodIPs) > 0 && pod.Status.PodIPs[0].IP == podIP {
		podIP = pod.Status.PodIPs[0].IP // one string for both, as the API server makes them equal
	}
	meta := informer.KeptMeta(&pod.ObjectMeta)
	meta.Labels = p.internLabels(pod.Labels)
	return &v1.Pod{
		TypeMeta:   pod.TypeMeta,
		ObjectMeta: meta,
		Spec: v1.PodSpec{
			NodeName:       pod.Spec.NodeName,
			Hostname:       pod.Spec.Hostname,
			Subdomain:      pod.Spec.Subdomain,
			Containers:     containers,
			InitContainers: initContainers,
		},
		Status: v1.PodStatus{
			Phase:      pod.Status.Phase,
			PodIP:      podIP,
			PodIPs:     pod.Status.PodIPs,
			Conditions: projectReadyCondition(pod.Status.Conditions),
		},
	}
}

// projectReadyCondition keeps the Ready condition alone, and of it only the status and the
// lastTransitionTime the trigger time is taken from: readiness is all either controller reads
// of a Pod's conditions, and a kubelet reports five, each with a reason and a message. (Not
// nodelifecycle's nodeReadyCondition, a lookup that returns a Node's condition whole.)
func projectReadyCondition(in []v1.PodCondition) []v1.PodCondition {
	for _, c := range in {
		if c.Type == v1.PodReady {
			return []v1.PodCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	return nil
}
