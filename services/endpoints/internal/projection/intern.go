package projection

import (
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/shared/informer"
)

// internLimit bounds each interner (informer.Interner): at most twice this many values are
// remembered. Enough for every label set and port layout of a large cluster's workloads; past
// it, values are shared less, never wrongly.
const internLimit = 4096

// interners share equal label sets and port layouts between the Pods of one projection.
type interners struct {
	labels *informer.Interner[map[string]string]
	ports  *informer.Interner[projectedPorts]
}

// internLabels returns a map equal to labels, shared with every other projected Pod whose
// labels are the same (the Pods of one ReplicaSet). nil and empty stay as they are.
func (p *Projection) internLabels(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return labels
	}
	keys := make([]string, 0, len(labels))
	n := 0
	for k, v := range labels {
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	sort.Strings(keys)
	var b strings.Builder
	b.Grow(n)
	// Label keys and values cannot hold a NUL, so it separates them unambiguously.
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return p.interned.labels.Get(b.String(), labels)
}

// projectedPorts are a Pod's container ports as the projection keeps them: see
// projectContainers.
type projectedPorts struct {
	containers, initContainers []v1.Container
}

// projectContainers returns what named-port lookup (k8s.io/endpointslice FindPort, the only
// reader of a Pod's containers here) needs of them: the ports of the app containers, in
// order, and those of the sidecars (init containers with restartPolicy Always), in order. The
// lookup takes the first port of the right name and protocol among the containers, then among
// the sidecars; each list is kept as the ports of one container, so the first match is the
// same port. Containers' names, images and everything else, other init containers, and a
// port's host port and host IP are never read. The result is shared by every Pod with the
// same ports.
func (pr *Projection) projectContainers(pod *v1.Pod) (containers, initContainers []v1.Container) {
	var app, sidecar []v1.ContainerPort
	var b strings.Builder
	for i := range pod.Spec.Containers {
		app = appendPorts(app, &b, pod.Spec.Containers[i].Ports)
	}
	b.WriteByte(1) // between the containers' ports and the sidecars'
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sidecar = appendPorts(sidecar, &b, c.Ports)
		}
	}
	if app == nil && sidecar == nil {
		return nil, nil
	}
	var p projectedPorts
	if app != nil {
		p.containers = []v1.Container{{Ports: app}}
	}
	if sidecar != nil {
		always := v1.ContainerRestartPolicyAlways
		p.initContainers = []v1.Container{{Ports: sidecar, RestartPolicy: &always}}
	}
	p = pr.interned.ports.Get(b.String(), p)
	return p.containers, p.initContainers
}

// appendPorts appends the name, number and protocol of each port to out, and to key.
func appendPorts(out []v1.ContainerPort, key *strings.Builder, ports []v1.ContainerPort) []v1.ContainerPort {
	for _, p := range ports {
		out = append(out, v1.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: p.Protocol})
		key.WriteString(p.Name)
		key.WriteByte(0)
		key.WriteString(strconv.Itoa(int(p.ContainerPort)))
		key.WriteByte(0)
		key.WriteString(string(p.Protocol))
		key.WriteByte(0)
	}
	return out
}
