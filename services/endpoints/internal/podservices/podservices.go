// Package podservices maps between Pods and the Services that select them, both ways: the
// Pods of a Service (Lister, through a label index) and the Services a Pod event concerns
// (Selecting, ForUpdate). The Endpoints and EndpointSlice controllers both turn Pod events
// into Service keys and list a Service's Pods; they must agree on which Pod changes matter,
// or one of the two objects a Service gets would lag the other.
package podservices

import (
	"context"
	"fmt"
	"maps"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	endpointsliceutil "k8s.io/endpointslice/util"

	"github.com/kcm-split/kcm-split/shared/informer"
)

// Lister is the controllers' Pod lister: through a label index (informer.SelectingPods),
// so that listing a Service's Pods reads those Pods rather than the whole namespace. Should the
// index not be addable (an informer already started), it is the plain lister, slower only.
func Lister(pods coreinformers.PodInformer) corelisters.PodLister {
	l, err := informer.SelectingPods(pods.Informer())
	if err != nil {
		return pods.Lister()
	}
	return l
}

// ForUpdate returns the keys of the Services whose Endpoints or EndpointSlices a Pod
// update can change.
func ForUpdate(services informer.ServiceSelectors, oldObj, newObj any) map[string]struct{} {
	old, cur := PodFrom(oldObj), PodFrom(newObj)
	if old == nil || cur == nil {
		return nil
	}
	// Same version: an informer replaying its cache, not a change. Services are resynced
	// through their own informer; fanning every Pod out to them again would add nothing.
	if old.ResourceVersion == cur.ResourceVersion {
		return nil
	}
	contentChanged, labelsChanged := podChange(old, cur)
	switch {
	case !contentChanged && !labelsChanged:
		// Most Pod updates (annotations, container statuses, conditions other than Ready)
		// cannot change any Endpoints.
		return nil
	case !labelsChanged:
		return Selecting(services, cur.Namespace, cur.Labels)
	default:
		before := Selecting(services, old.Namespace, old.Labels)
		after := Selecting(services, cur.Namespace, cur.Labels)
		return affectedServices(before, after, contentChanged)
	}
}

// Not endpointsliceutil.GetPodUpdateProjectionKey: it misses turns to a terminal phase and podIP, node or hostname changes.
// podChange tells whether a Pod update can change the address a Service gets from it
// (contentChanged) or which Services select it (labelsChanged).
func podChange(old, cur *v1.Pod) (contentChanged, labelsChanged bool) {
	labelsChanged = !maps.Equal(old.Labels, cur.Labels)
	contentChanged = !timesEqual(old.DeletionTimestamp, cur.DeletionTimestamp) ||
		endpointsliceutil.IsPodReady(old) != endpointsliceutil.IsPodReady(cur) ||
		isTerminal(old) != isTerminal(cur) ||
		old.Spec.NodeName != cur.Spec.NodeName ||
		old.Spec.Hostname != cur.Spec.Hostname ||
		old.Spec.Subdomain != cur.Spec.Subdomain ||
		!podIPsEqual(old.Status.PodIPs, cur.Status.PodIPs) ||
		old.Status.PodIP != cur.Status.PodIP
	return contentChanged, labelsChanged
}

// Not endpointsliceutil.GetServicesToUpdate, for the reason given at Selecting.
// affectedServices picks the Services to sync after a Pod's labels changed: those that gained
// or lost the Pod, and, if the Pod's address changed as well, also those that kept it.
func affectedServices(before, after map[string]struct{}, contentChanged bool) map[string]struct{} {
	out := map[string]struct{}{}
	for k := range before {
		if _, kept := after[k]; !kept || contentChanged {
			out[k] = struct{}{}
		}
	}
	for k := range after {
		if _, kept := before[k]; !kept || contentChanged {
			out[k] = struct{}{}
		}
	}
	return out
}

// Not endpointsliceutil.GetServicesToUpdate: it would also queue ExternalName Services, which never get Endpoints.
// Selecting returns the keys of the Services in namespace whose selector matches
// podLabels. A nil selector selects nothing (its Endpoints are managed by someone else); an
// empty one selects every Pod. ExternalName Services are skipped: they never get Endpoints.
func Selecting(selectors informer.ServiceSelectors, namespace string, podLabels map[string]string) map[string]struct{} {
	services, err := selectors.Selecting(namespace, podLabels)
	if err != nil {
		// An index of memory; this does not happen in practice.
		utilruntime.HandleErrorWithContext(context.Background(), err, "Cannot list Services", "namespace", namespace)
		return nil
	}
	keys := make(map[string]struct{}, len(services))
	for _, svc := range services {
		if svc.Spec.Type == v1.ServiceTypeExternalName {
			continue
		}
		keys[svc.Namespace+"/"+svc.Name] = struct{}{}
	}
	return keys
}

// PodFrom unwraps a Pod from an informer notification, tombstones included; nil (and the
// error reported) for anything else.
func PodFrom(obj any) *v1.Pod {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		utilruntime.HandleErrorWithContext(context.Background(), nil, "Unexpected object in Pod notification", "type", fmt.Sprintf("%T", obj))
		return nil
	}
	return pod
}

// k8s.io/endpointslice keeps its terminal-phase check unexported.
func isTerminal(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

func podIPsEqual(a, b []v1.PodIP) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].IP != b[i].IP {
			return false
		}
	}
	return true
}

func timesEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}
