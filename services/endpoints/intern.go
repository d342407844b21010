package endpoints

import (
	"sort"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
)

// internLimit bounds each interner: at most twice this many values are remembered (the
// current generation and the one before). Enough for every label set and port layout of a
// large cluster's workloads; past it, values are shared less, never wrongly.
const internLimit = 4096

// interner hands out one shared instance of equal values, named by a key that describes
// them completely. The cache projection uses it for what the Pods of one workload have in
// common (their labels, their ports): cached Pods are never mutated, so equal ones can share
// one copy, and thousands of Pods then cost one map and one slice instead of one each.
//
// Values are forgotten by generation, not by reference count: when the current generation
// is full it becomes the previous one and the one before is dropped; a value found in the
// previous generation moves back to the current one. A forgotten value stays valid for the
// Pods holding it; the next equal value simply starts a new shared instance.
type interner[V any] struct {
	mu        sync.Mutex
	cur, prev map[string]V
	limit     int
}

func newInterner[V any](limit int) *interner[V] {
	return &interner[V]{cur: make(map[string]V), limit: limit}
}

// get returns the shared value for key, v itself when none is remembered.
func (t *interner[V]) get(key string, v V) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if got, ok := t.cur[key]; ok {
		return got
	}
	if got, ok := t.prev[key]; ok {
		v = got
	}
	if len(t.cur) >= t.limit {
		t.prev, t.cur = t.cur, make(map[string]V, len(t.cur))
	}
	t.cur[key] = v
	return v
}

// len is the number of values remembered, for tests.
func (t *interner[V]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cur) + len(t.prev)
}

var (
	podLabels = newInterner[map[string]string](internLimit)
	podPorts  = newInterner[projectedPorts](internLimit)
)

// internLabels returns a map equal to labels, shared with every other projected Pod whose
// labels are the same (the Pods of one ReplicaSet). nil and empty stay as they are.
func internLabels(labels map[string]string) map[string]string {
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
	return podLabels.get(b.String(), labels)
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
func projectContainers(pod *v1.Pod) (containers, initContainers []v1.Container) {
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
	p = podPorts.get(b.String(), p)
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
