package testenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// KCMPodLabels are the labels kubeadm gives kube-controller-manager's static Pod.
func KCMPodLabels() map[string]string {
	return map[string]string{"component": "kube-controller-manager", "tier": "control-plane"}
}

// PublishMirrorPod does what the kubelet does when a static Pod's manifest changes: the old
// mirror Pod ns/name is deleted and a new one created on node, for a container named
// container running command, before that container starts (MirrorPodStarted records the
// start). It tolerates every taint, as kubeadm's static Pods do.
func PublishMirrorPod(ctx context.Context, c kubernetes.Interface, ns, name, node, container string, labels map[string]string, command []string) error {
	err := c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
			// The mirror annotation keeps ServiceAccount admission off the Pod, as for the kubelet's.
			Annotations: map[string]string{"kubernetes.io/config.mirror": string(uuid.NewUUID())}},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: container, Image: "registry.k8s.io/" + container + ":v1.36.3", Command: command}}},
	}
	// Until the deletion is through, the name is taken.
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// MirrorPodStarted records in mirror Pod ns/name's status, as the kubelet does, that its one
// container runs since started (the status keeps whole seconds).
func MirrorPodStarted(ctx context.Context, c kubernetes.Interface, ns, name string, started time.Time) error {
	p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(p.Spec.Containers) != 1 {
		return fmt.Errorf("pod %s/%s has %d containers", ns, name, len(p.Spec.Containers))
	}
	ctr := p.Spec.Containers[0]
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ctr.Name, Ready: true, Image: ctr.Image,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}}
	_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}
