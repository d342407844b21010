package pvbinder_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/services/pvbinder"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// releaseForRecycle creates a hostPath PV with the Recycle policy, binds a claim to it and
// deletes the claim; it returns the PV's name.
func releaseForRecycle(t *testing.T, c kubernetes.Interface, ns, suffix string) string {
	t.Helper()
	name := ns + "-" + suffix
	createPV(t, c, pv(name, ns, "1Gi", func(p *corev1.PersistentVolume) {
		p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRecycle
	}))
	createClaim(t, c, claim(ns, suffix, ns, "1Gi"))
	waitClaim(t, c, ns, suffix, "Bound", boundTo(name))
	deleteClaim(t, c, ns, suffix)
	return name
}

func waitRecyclerPod(t *testing.T, c kubernetes.Interface, pvName, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	last, ok := testenv.PollObject(50*time.Millisecond, 60*time.Second, func(ctx context.Context) (*corev1.Pod, error) {
		return c.CoreV1().Pods("default").Get(ctx, "recycler-for-"+pvName, metav1.GetOptions{})
	}, cond)
	if !ok {
		t.Fatalf("recycler pod of %s not %s: %+v", pvName, what, last)
	}
	return last
}

// setPodPhase plays the kubelet.
func setPodPhase(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, phase corev1.PodPhase, message string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		p.Status.Phase, p.Status.Message = phase, message
		_, err = c.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("setting %s/%s %s: %v", pod.Namespace, pod.Name, phase, err)
	}
}

// startKwok runs kwok for the Nodes annotated kwok.x-k8s.io/node=<ns>; false when `make tools`
// has not built it.
func startKwok(t *testing.T, ns string) bool {
	t.Helper()
	if testenv.KwokBuilt() != nil {
		return false
	}
	env.StartKwok(t, testenv.Kwok{Manage: "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=" + ns})
	return true
}

// Recycle: the binder creates upstream's recycler Pod for the released volume; kwok plays
// the node it is scheduled to (the test plays the scheduler) and runs it, the Pod's events
// are forwarded to the PV, and when the Pod has succeeded (set by the test, as the kubelet
// would: kwok's completion stage is for Job Pods only) the PV is Available again and the
// Pod removed.
func TestRecycleSucceededOnKwokNode(t *testing.T) {
	c, ns, _ := withController(t)
	kwok := startKwok(t, ns)
	node := ns + "-node"
	if kwok {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{"kwok.x-k8s.io/node": ns}}}
		if _, err := c.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	} else {
		t.Log("no bin/kwok: the test plays the node alone")
	}
	name := releaseForRecycle(t, c, ns, "scratch")
	pod := waitRecyclerPod(t, c, name, "created", func(p *corev1.Pod) bool { return p != nil })
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds != 60 ||
		pod.Spec.Volumes[0].HostPath == nil || pod.Spec.Volumes[0].HostPath.Path != "/tmp/"+name ||
		pod.Spec.Containers[0].Image != "registry.k8s.io/build-image/debian-base:bookworm-v1.0.6" ||
		!strings.Contains(strings.Join(pod.Spec.Containers[0].Args, " "), "find /scrub -mindepth 1 -delete") {
		t.Fatalf("recycler pod is not upstream's template: %+v", pod.Spec)
	}
	if p, _ := c.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{}); p.Status.Phase != corev1.VolumeReleased {
		t.Errorf("PV %s while its recycler runs", describePV(p))
	}
	if kwok {
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
		if err := c.CoreV1().Pods("default").Bind(context.Background(), binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitRecyclerPod(t, c, name, "Running on the kwok node", func(p *corev1.Pod) bool { return p != nil && p.Status.Phase == corev1.PodRunning })
	}
	// An event about the Pod (the kubelet's) reaches the PV.
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", GenerateName: pod.Name + "-"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod.Name, UID: pod.UID},
		Reason:         "Pulled", Message: "Container image already present on machine", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "kubelet"},
	}
	if _, err := c.CoreV1().Events("default").Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, "default", name, pvbinder.ReasonRecyclerPod)
	if got := events(t, c, "default", name); !strings.Contains(got, "RecyclerPod: Recycler pod: Container image already present on machine") {
		t.Errorf("events: %s", got)
	}

	setPodPhase(t, c, pod, corev1.PodSucceeded, "")
	got := waitPV(t, c, name, "Available", phase(corev1.VolumeAvailable))
	if got.Spec.ClaimRef != nil {
		t.Errorf("recycled PV keeps its claimRef: %s", describePV(got))
	}
	waitEvent(t, c, "default", name, pvbinder.ReasonVolumeRecycled)
	waitRecyclerPod(t, c, name, "removed", func(p *corev1.Pod) bool { return p == nil })
	// Available again: a new claim binds it.
	createClaim(t, c, claim(ns, "again", ns, "1Gi"))
	waitClaim(t, c, ns, "again", "Bound", boundTo(name))
}

// A recycler Pod that fails leaves the PV Failed with upstream's event carrying the Pod's
// message, and is removed.
func TestRecycleFailed(t *testing.T) {
	c, ns, _ := withController(t)
	name := releaseForRecycle(t, c, ns, "scratch")
	pod := waitRecyclerPod(t, c, name, "created", func(p *corev1.Pod) bool { return p != nil })
	setPodPhase(t, c, pod, corev1.PodFailed, "find: /scrub/x: Permission denied")
	got := waitPV(t, c, name, "Failed", phase(corev1.VolumeFailed))
	if !strings.Contains(got.Status.Message, "Permission denied") {
		t.Errorf("message %q", got.Status.Message)
	}
	waitEvent(t, c, "default", name, pvbinder.ReasonVolumeFailedRecycle)
	if ev := events(t, c, "default", name); !strings.Contains(ev, "VolumeFailedRecycle: Recycle failed: failed to recycle volume: find: /scrub/x: Permission denied") {
		t.Errorf("events: %s", ev)
	}
	waitRecyclerPod(t, c, name, "removed", func(p *corev1.Pod) bool { return p == nil })
}

// Only NFS and hostPath volumes are recyclable: any other gets upstream's failure event.
func TestRecycleNotRecyclable(t *testing.T) {
	c, ns, _ := withController(t)
	name := ns + "-csi"
	createPV(t, c, pv(name, ns, "1Gi", func(p *corev1.PersistentVolume) {
		p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRecycle
		p.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "d.example.com", VolumeHandle: "h"}}
	}))
	createClaim(t, c, claim(ns, "c", ns, "1Gi"))
	waitClaim(t, c, ns, "c", "Bound", boundTo(name))
	deleteClaim(t, c, ns, "c")
	waitPV(t, c, name, "Failed", phase(corev1.VolumeFailed))
	waitEvent(t, c, "default", name, pvbinder.ReasonVolumeFailedRecycle)
	if ev := events(t, c, "default", name); !strings.Contains(ev, "No recycler plugin found for the volume!") {
		t.Errorf("events: %s", ev)
	}
}
