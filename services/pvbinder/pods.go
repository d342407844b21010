package pvbinder

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/ephemeral"
)

// podClaimIndex indexes Pods by the keys (ns/name) of the claims they use, directly or as
// generic ephemeral volumes, as upstream's binder does.
const podClaimIndex = "pvcKey"

// No library serves this: upstream's Pod-to-claim index function is in k8s.io/kubernetes itself.
func podClaimKeys(obj any) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return nil, nil
	}
	var keys []string
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		switch {
		case vol.PersistentVolumeClaim != nil:
			keys = append(keys, claimKey(pod.Namespace, vol.PersistentVolumeClaim.ClaimName))
		case vol.Ephemeral != nil:
			keys = append(keys, claimKey(pod.Namespace, ephemeral.VolumeClaimName(pod, vol)))
		}
	}
	return keys, nil
}

// No library serves this: upstream's check is in k8s.io/kubernetes' volume utilities.
//
// podTerminated reports whether a Pod will not run again: Succeeded or Failed, or being
// deleted with no container running.
func podTerminated(pod *v1.Pod) bool {
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return true
	}
	if pod.DeletionTimestamp == nil {
		return false
	}
	for _, list := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range list {
			if s.State.Terminated == nil && s.State.Waiting == nil {
				return false
			}
		}
	}
	return true
}

// podsOf returns the Pods using the claim with key ns/name.
func podsOf(pods cache.Indexer, key string) ([]*v1.Pod, error) {
	objs, err := pods.ByIndex(podClaimIndex, key)
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*v1.Pod); ok {
			out = append(out, pod)
		}
	}
	return out, nil
}

// unscheduledConsumers names the Pods using the claim that are not terminated and not yet
// on a node: what a claim of a WaitForFirstConsumer class waits for.
func unscheduledConsumers(pods []*v1.Pod) []string {
	var names []string
	for _, pod := range pods {
		if !podTerminated(pod) && pod.Spec.NodeName == "" {
			names = append(names, pod.Name)
		}
	}
	return names
}

// waitForConsumerEvent is the event of an unbound claim of a WaitForFirstConsumer class
// with no selected node, as upstream: the Pods it waits for when some exist.
func waitForConsumerEvent(podNames []string) (reason, message string) {
	switch len(podNames) {
	case 0:
		return ReasonWaitForFirstConsumer, "waiting for first consumer to be created before binding"
	case 1:
		return ReasonWaitForPodScheduled, fmt.Sprintf("waiting for pod %s to be scheduled", podNames[0])
	default:
		// The scheduler considers one Pod, but which one is unknown here: all are named.
		return ReasonWaitForPodScheduled, fmt.Sprintf("waiting for pods %s to be scheduled", strings.Join(podNames, ","))
	}
}
