package quota

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Cache trimming: the monitors keep only what evaluators and replenishment read.

// trimObjectMeta clears the metadata nothing reads.
func trimObjectMeta(m *metav1.ObjectMeta) {
	m.GenerateName = ""
	m.ManagedFields = nil
	m.Labels = nil
	m.OwnerReferences = nil
	m.Finalizers = nil
	// The beta StorageClass annotation decides a claim's class; nothing else is read.
	keepOnlyAnnotation(m, v1.BetaStorageClassAnnotation)
}

// keepOnlyAnnotation drops every annotation but key (nil when key is not there either).
func keepOnlyAnnotation(m *metav1.ObjectMeta, key string) {
	if v, ok := m.Annotations[key]; ok {
		m.Annotations = map[string]string{key: v}
	} else {
		m.Annotations = nil
	}
}

// trimMeta drops what no evaluator reads from any object with metadata. A metadata informer's
// objects also name their kind (always PartialObjectMetadata): nothing reads it.
func trimMeta(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.TypeMeta = metav1.TypeMeta{}
	}
	if o, ok := obj.(metav1.ObjectMetaAccessor); ok {
		trimObjectMeta(o.GetObjectMeta().(*metav1.ObjectMeta))
	}
	return obj, nil
}

// trimPod, for the Pods podTransform does not compact, keeps the fields Pod usage and scopes
// depend on: resources (containers, init containers, pod-level, overhead, what the kubelet
// allocated), phase, deletion, deadline, priority class, QoS class, affinity and resize
// conditions.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return obj, nil
	}
	trimObjectMeta(&pod.ObjectMeta)
	var affinity *v1.Affinity
	if a := pod.Spec.Affinity; a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil) {
		affinity = &v1.Affinity{PodAffinity: a.PodAffinity, PodAntiAffinity: a.PodAntiAffinity}
	}
	pod.Spec = v1.PodSpec{
		Containers:            trimContainers(pod.Spec.Containers),
		InitContainers:        trimContainers(pod.Spec.InitContainers),
		Resources:             pod.Spec.Resources,
		Overhead:              pod.Spec.Overhead,
		ActiveDeadlineSeconds: pod.Spec.ActiveDeadlineSeconds,
		PriorityClassName:     pod.Spec.PriorityClassName,
		Affinity:              affinity,
	}
	var conditions []v1.PodCondition
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodResizePending || c.Type == v1.PodResizeInProgress {
			conditions = append(conditions, v1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason})
		}
	}
	// Which claim carries the Pod's extended resources: that claim is not charged them a
	// second time.
	var extendedClaim *v1.PodExtendedResourceClaimStatus
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		extendedClaim = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: st.ResourceClaimName}
	}
	pod.Status = v1.PodStatus{
		Phase:                       pod.Status.Phase,
		QOSClass:                    pod.Status.QOSClass,
		Conditions:                  conditions,
		ContainerStatuses:           trimContainerStatuses(pod.Status.ContainerStatuses),
		InitContainerStatuses:       trimContainerStatuses(pod.Status.InitContainerStatuses),
		Resources:                   pod.Status.Resources,
		AllocatedResources:          pod.Status.AllocatedResources,
		ExtendedResourceClaimStatus: extendedClaim,
	}
	return pod, nil
}

// trimContainers keeps of each container what its usage depends on.
func trimContainers(cs []v1.Container) []v1.Container {
	out := make([]v1.Container, len(cs))
	for i := range cs {
		out[i] = v1.Container{Name: cs[i].Name, Resources: cs[i].Resources, RestartPolicy: cs[i].RestartPolicy}
	}
	return out
}

// trimContainerStatuses keeps of each status the resources the kubelet allocated and applied.
func trimContainerStatuses(ss []v1.ContainerStatus) []v1.ContainerStatus {
	out := make([]v1.ContainerStatus, len(ss))
	for i := range ss {
		out[i] = v1.ContainerStatus{Name: ss[i].Name, Resources: ss[i].Resources, AllocatedResources: ss[i].AllocatedResources}
	}
	return out
}

// trimService keeps the type and ports.
func trimService(obj any) (any, error) {
	svc, ok := obj.(*v1.Service)
	if !ok {
		return obj, nil
	}
	trimObjectMeta(&svc.ObjectMeta)
	svc.Spec = v1.ServiceSpec{
		Type:                          svc.Spec.Type,
		Ports:                         svc.Spec.Ports,
		AllocateLoadBalancerNodePorts: svc.Spec.AllocateLoadBalancerNodePorts,
	}
	svc.Status = v1.ServiceStatus{}
	return svc, nil
}
