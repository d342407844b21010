package endpoints

import (
	"net/netip"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// podInEndpoints reports whether pod belongs in its Services' Endpoints at all, ready or not.
func podInEndpoints(pod *v1.Pod, publishNotReady bool) bool {
	// A Succeeded or Failed Pod never serves again, whatever its conditions still say.
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return false
	}
	if pod.Status.PodIP == "" && len(pod.Status.PodIPs) == 0 {
		return false
	}
	// A terminating Pod is normally taken out so clients stop sending it new work during its
	// grace period. Services that publish not-ready addresses (typically headless Services of
	// StatefulSets, used for peer discovery) keep it until it is actually gone.
	if pod.DeletionTimestamp != nil && !publishNotReady {
		return false
	}
	return true
}

// podReadyCondition returns the Pod's Ready condition, or nil.
func podReadyCondition(pod *v1.Pod) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == v1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// podReady is the kubelet's verdict: the Ready condition is True.
func podReady(pod *v1.Pod) bool {
	c := podReadyCondition(pod)
	return c != nil && c.Status == v1.ConditionTrue
}

// parseIP parses an IP the way the API server's legacy validation accepts it: IPv4 octets may
// carry leading zeros (read as decimal), and an IPv4-mapped IPv6 address counts as IPv4.
// Re-printing the result gives the canonical form written into Endpoints.
func parseIP(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, p := range parts {
		if p == "" || len(p) > 3 {
			return netip.Addr{}, false
		}
		n, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return netip.Addr{}, false
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), true
}

// serviceIPFamily is the family of the addresses the Service's Endpoints carry: its primary
// family. The API server always sets spec.ipFamilies, but an object seen before defaulting
// (or written by an old client) may lack it; then the cluster IP, or failing that the Pod's
// own IP, decides.
func serviceIPFamily(svc *v1.Service, pod *v1.Pod) v1.IPFamily {
	if len(svc.Spec.IPFamilies) > 0 {
		return svc.Spec.IPFamilies[0]
	}
	probe := pod.Status.PodIP
	if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != v1.ClusterIPNone {
		probe = svc.Spec.ClusterIP
	}
	if a, ok := parseIP(probe); ok && a.Is6() {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

// podIPForService returns the Pod's first IP of the Service's family. A Pod without one
// (a single-stack Pod behind a Service of the other family, during a dual-stack migration)
// cannot be reached through this Service and is left out.
func podIPForService(svc *v1.Service, pod *v1.Pod) (string, bool) {
	want6 := serviceIPFamily(svc, pod) == v1.IPv6Protocol
	for _, pip := range pod.Status.PodIPs {
		a, ok := parseIP(pip.IP)
		if ok && a.Is6() == want6 {
			return a.String(), true
		}
	}
	return "", false
}

// podAddress builds the Endpoints address of pod for svc.
func podAddress(svc *v1.Service, pod *v1.Pod) (v1.EndpointAddress, bool) {
	ip, ok := podIPForService(svc, pod)
	if !ok {
		return v1.EndpointAddress{}, false
	}
	addr := v1.EndpointAddress{
		IP: ip,
		TargetRef: &v1.ObjectReference{
			Kind:      "Pod",
			Namespace: pod.Namespace,
			Name:      pod.Name,
			UID:       pod.UID,
		},
	}
	// An unscheduled Pod has no node; the API server rejects an empty nodeName, so the field
	// is left out rather than written empty (upstream writes "" and then fails the whole
	// Service).
	if pod.Spec.NodeName != "" {
		node := pod.Spec.NodeName
		addr.NodeName = &node
	}
	// The hostname makes <hostname>.<service>.<ns>.svc resolvable: DNS publishes it only for
	// Pods that asked for this Service as their subdomain.
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && pod.Namespace == svc.Namespace {
		addr.Hostname = pod.Spec.Hostname
	}
	return addr, true
}

// targetPort resolves the Service port's targetPort on pod. A number is used as is; a name
// is looked up among the Pod's container ports of the same protocol, including those of
// sidecars (restartable init containers), since they serve for the Pod's whole life.
func targetPort(pod *v1.Pod, sp *v1.ServicePort) (int32, bool) {
	if sp.TargetPort.Type == intstr.Int {
		return sp.TargetPort.IntVal, true
	}
	name := sp.TargetPort.StrVal
	find := func(ports []v1.ContainerPort) (int32, bool) {
		for _, p := range ports {
			if p.Name == name && p.Protocol == sp.Protocol {
				return p.ContainerPort, true
			}
		}
		return 0, false
	}
	for i := range pod.Spec.Containers {
		if n, ok := find(pod.Spec.Containers[i].Ports); ok {
			return n, true
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways {
			continue
		}
		if n, ok := find(c.Ports); ok {
			return n, true
		}
	}
	return 0, false
}

// desiredSubsets computes the Service's subsets from the Pods its selector matches, in
// canonical form, before any capacity limit.
//
// Each (Pod, port) pair becomes its own one-address subset first; repacking then merges
// those sharing a port set. Doing it this way keeps per-Pod port resolution simple: a Pod
// lacking a named port is left out of that port's subset only.
func desiredSubsets(svc *v1.Service, pods []*v1.Pod) []v1.EndpointSubset {
	publishNotReady := svc.Spec.PublishNotReadyAddresses
	// Headless Services may have no ports at all; their Endpoints then list bare addresses,
	// which is all DNS needs. A non-headless Service without ports gets nothing.
	addressOnly := len(svc.Spec.Ports) == 0 && svc.Spec.ClusterIP == v1.ClusterIPNone

	var raw []v1.EndpointSubset
	for _, pod := range pods {
		if !podInEndpoints(pod, publishNotReady) {
			continue
		}
		addr, ok := podAddress(svc, pod)
		if !ok {
			continue
		}
		ready := publishNotReady || podReady(pod)
		add := func(ports []v1.EndpointPort) {
			s := v1.EndpointSubset{Ports: ports}
			if ready {
				s.Addresses = []v1.EndpointAddress{addr}
			} else {
				s.NotReadyAddresses = []v1.EndpointAddress{addr}
			}
			raw = append(raw, s)
		}
		if addressOnly {
			add(nil)
			continue
		}
		for i := range svc.Spec.Ports {
			sp := &svc.Spec.Ports[i]
			n, ok := targetPort(pod, sp)
			if !ok {
				continue
			}
			port := v1.EndpointPort{Name: sp.Name, Port: n, Protocol: sp.Protocol}
			if sp.AppProtocol != nil {
				// A copy, so the result shares no memory with the informer's Service.
				app := *sp.AppProtocol
				port.AppProtocol = &app
			}
			add([]v1.EndpointPort{port})
		}
	}
	return repackSubsets(raw)
}
