package endpoints

import (
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/subsets"
)

// LabelManagedBy marks the Endpoints this controller owns, with ComponentName as its value.
const LabelManagedBy = "endpoints.kubernetes.io/managed-by"

// headless reports whether the Service has no cluster IP.
func headless(svc *v1.Service) bool {
	return svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == v1.ClusterIPNone
}

// desiredLabels are the Service's labels, plus the managed-by label and the headless marker
// for headless Services. Labels set on the Endpoints by anyone else do not survive a write:
// the Service is the one place to put them.
func desiredLabels(svc *v1.Service) map[string]string {
	l := make(map[string]string, len(svc.Labels)+2)
	maps.Copy(l, svc.Labels)
	delete(l, v1.IsHeadlessService)
	if headless(svc) {
		l[v1.IsHeadlessService] = ""
	}
	l[LabelManagedBy] = ComponentName
	return l
}

// labelsUpToDate compares current labels with desired ones. The headless marker is left out
// of the comparison, as upstream does: Endpoints written before the marker existed are not
// all rewritten for it, and it is fixed on the next real change.
func labelsUpToDate(current, desired map[string]string) bool {
	n := 0
	for k, v := range current {
		if k == v1.IsHeadlessService {
			continue
		}
		if dv, ok := desired[k]; !ok || dv != v {
			return false
		}
		n++
	}
	_, dh := desired[v1.IsHeadlessService]
	if dh {
		return n == len(desired)-1
	}
	return n == len(desired)
}

// overCapacityUpToDate reports whether the over-capacity annotation says what truncated says.
func overCapacityUpToDate(annotations map[string]string, truncated bool) bool {
	v, ok := annotations[v1.EndpointsOverCapacity]
	if truncated {
		return v == overCapacityTruncated
	}
	return !ok
}

// upToDate reports whether current already is what this controller would write, so the write
// can be skipped. The trigger-time annotation is deliberately not compared: it describes the
// change behind a write and on its own never justifies one.
func upToDate(current *v1.Endpoints, svc *v1.Service, want []v1.EndpointSubset, truncated bool) bool {
	if !labelsUpToDate(current.Labels, desiredLabels(svc)) || !overCapacityUpToDate(current.Annotations, truncated) {
		return false
	}
	if subsetsEqual(current.Subsets, want) {
		return true
	}
	// Someone else (an older controller, a restore from backup) may have written the same
	// content in another order or grouping; it is still the same content.
	return subsetsEqual(subsets.Repack(current.Subsets), want)
}

// buildEndpoints returns the Endpoints to write. current is nil when there is none yet;
// otherwise its metadata (resourceVersion, annotations of others, owner references) carries
// over on a copy, never on the informer's object.
func buildEndpoints(current *v1.Endpoints, svc *v1.Service, subsets []v1.EndpointSubset, truncated bool, triggerTime time.Time) *v1.Endpoints {
	var ep *v1.Endpoints
	if current == nil {
		ep = &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name}}
	} else {
		// Copied without its subsets, which are replaced: for a large Service they are
		// most of the object.
		meta := *current
		meta.Subsets = nil
		ep = meta.DeepCopy()
	}
	ep.Subsets = subsets
	ep.Labels = desiredLabels(svc)
	if ep.Annotations == nil {
		ep.Annotations = map[string]string{}
	}
	// Without a new trigger, an old trigger time would be misread as the cause of this
	// write by whoever measures network programming latency, so it is removed.
	if triggerTime.IsZero() {
		delete(ep.Annotations, v1.EndpointsLastChangeTriggerTime)
	} else {
		ep.Annotations[v1.EndpointsLastChangeTriggerTime] = triggerTime.UTC().Format(time.RFC3339Nano)
	}
	if truncated {
		ep.Annotations[v1.EndpointsOverCapacity] = overCapacityTruncated
	} else {
		delete(ep.Annotations, v1.EndpointsOverCapacity)
	}
	return ep
}

// subsetsEqual compares subsets field by field, except the resourceVersion of target
// references: it changes on every Pod update, including the many that cannot affect
// Endpoints, and older writers recorded it. Nil and empty lists are equal.
func subsetsEqual(a, b []v1.EndpointSubset) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !addressesEqual(a[i].Addresses, b[i].Addresses) ||
			!addressesEqual(a[i].NotReadyAddresses, b[i].NotReadyAddresses) ||
			!portsEqual(a[i].Ports, b[i].Ports) {
			return false
		}
	}
	return true
}

func addressesEqual(a, b []v1.EndpointAddress) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.IP != y.IP || x.Hostname != y.Hostname || !ptrEqual(x.NodeName, y.NodeName) ||
			!targetRefEqual(x.TargetRef, y.TargetRef) {
			return false
		}
	}
	return true
}

func targetRefEqual(a, b *v1.ObjectReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.ResourceVersion, y.ResourceVersion = "", ""
	return x == y
}

func portsEqual(a, b []v1.EndpointPort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Name != y.Name || x.Port != y.Port || x.Protocol != y.Protocol || !ptrEqual(x.AppProtocol, y.AppProtocol) {
			return false
		}
	}
	return true
}

func ptrEqual[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
