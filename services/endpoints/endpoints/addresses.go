package endpoints

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/endpointslice"
	endpointsliceutil "k8s.io/endpointslice/util"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/legacyip"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/subsets"
)

// No k8s.io/endpointslice function serves Endpoints (its IP-family logic is for EndpointSlices).
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
	if a, ok := legacyip.Parse(probe); ok && a.Is6() {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

// No k8s.io/endpointslice function picks a Pod IP for a core/v1 Endpoints address.
// podIPForService returns the Pod's first IP of the Service's family. A Pod without one
// (a single-stack Pod behind a Service of the other family, during a dual-stack migration)
// cannot be reached through this Service and is left out.
func podIPForService(svc *v1.Service, pod *v1.Pod) (string, bool) {
	want6 := serviceIPFamily(svc, pod) == v1.IPv6Protocol
	for _, pip := range pod.Status.PodIPs {
		a, ok := legacyip.Parse(pip.IP)
		if ok && a.Is6() == want6 {
			return a.String(), true
		}
	}
	return "", false
}

// No k8s.io/endpointslice function builds a core/v1 EndpointAddress (only slice endpoints).
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
	if endpointsliceutil.ShouldSetHostname(pod, svc) {
		addr.Hostname = pod.Spec.Hostname
	}
	return addr, true
}

// No k8s.io/endpointslice function computes Endpoints subsets; it serves the rules applied here.
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
		// A terminal Pod or one without an IP is left out; so is a terminating one, unless the
		// Service publishes not-ready addresses (peer discovery of StatefulSets relies on it).
		if !endpointsliceutil.ShouldPodBeInEndpoints(pod, publishNotReady) {
			continue
		}
		addr, ok := podAddress(svc, pod)
		if !ok {
			continue
		}
		ready := publishNotReady || endpointsliceutil.IsPodReady(pod)
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
			// A named target port is looked up among the Pod's container ports of the same
			// protocol, sidecars (restartable init containers) included.
			n, err := endpointslice.FindPort(pod, sp)
			if err != nil {
				continue
			}
			port := v1.EndpointPort{Name: sp.Name, Port: int32(n), Protocol: sp.Protocol}
			if sp.AppProtocol != nil {
				// A copy, so the result shares no memory with the informer's Service.
				app := *sp.AppProtocol
				port.AppProtocol = &app
			}
			add([]v1.EndpointPort{port})
		}
	}
	return subsets.Repack(raw)
}
