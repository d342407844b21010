package pvbinder

import (
	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/shared/informer"
)

// cacheTransform trims objects before they enter the informers' caches. Pods are the largest
// population by far and this controller reads little of them; every other object (volumes,
// claims, classes) is read whole and only loses managedFields.
var cacheTransform = informer.Transform(informer.Project(projectPod))

// projectPod keeps what this controller reads of a Pod: identity and deletion (the claim
// index, events naming the Pods a claim waits for, the UID precondition of a recycler Pod's
// delete), its creation time and the recycled-volume annotation (a recycler Pod's deadline and
// owner), the node (scheduled or not), the volumes that name claims (a claim's consumers), and
// phase, message and container states (whether the Pod still runs; a recycle's outcome).
// nodelifecycle and endpoints keep other Pod fields: each binary caches only what it reads.
func projectPod(pod *v1.Pod) *v1.Pod {
	out := &v1.Pod{
		TypeMeta:   pod.TypeMeta,
		ObjectMeta: informer.KeptMeta(&pod.ObjectMeta),
		Spec:       v1.PodSpec{NodeName: pod.Spec.NodeName},
		Status: v1.PodStatus{
			Phase:                      pod.Status.Phase,
			Message:                    pod.Status.Message,
			InitContainerStatuses:      projectStatuses(pod.Status.InitContainerStatuses),
			ContainerStatuses:          projectStatuses(pod.Status.ContainerStatuses),
			EphemeralContainerStatuses: projectStatuses(pod.Status.EphemeralContainerStatuses),
		},
	}
	if v, ok := pod.Annotations[AnnRecycledVolume]; ok {
		out.Annotations = map[string]string{AnnRecycledVolume: v}
	}
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil {
			out.Spec.Volumes = append(out.Spec.Volumes, v1.Volume{Name: vol.Name, VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: vol.PersistentVolumeClaim, Ephemeral: vol.Ephemeral}})
		}
	}
	return out
}

func projectStatuses(in []v1.ContainerStatus) []v1.ContainerStatus {
	if in == nil {
		return nil
	}
	out := make([]v1.ContainerStatus, len(in))
	for i := range in {
		out[i] = v1.ContainerStatus{Name: in[i].Name, State: in[i].State}
	}
	return out
}
