package pvbinder

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

// releasedRecyclable is a PV whose claim is gone, with the Recycle policy.
func releasedRecyclable(name, size string, opts ...pvOpt) *v1.PersistentVolume {
	return makePV(name, size, append([]pvOpt{pvRef("gone-"+name, "uid-gone"), pvPhase(v1.VolumeBound),
		pvAnn(storagehelpers.AnnBoundByController, "yes"), pvPolicy(v1.PersistentVolumeReclaimRecycle)}, opts...)...)
}

func recyclerPodOf(t *testing.T, api *apiServer, pv string) *v1.Pod {
	t.Helper()
	pod, err := api.CoreV1().Pods(metav1.NamespaceDefault).Get(context.Background(), recyclerPodPrefix+pv, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("recycler pod of %s: %v", pv, err)
	}
	return pod
}

// setPodPhase plays the kubelet.
func setPodPhase(t *testing.T, api *apiServer, pod *v1.Pod, phase v1.PodPhase, message string) {
	t.Helper()
	pod = pod.DeepCopy()
	pod.Status.Phase, pod.Status.Message = phase, message
	if _, err := api.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestRecyclerPod(t *testing.T) {
	rs, err := newRecyclers(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	hp := releasedRecyclable("hp", "10Gi")
	pod, err := rs.recyclerPod(hp)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != "recycler-for-hp" || pod.GenerateName != "" || pod.Namespace != "default" || pod.Annotations[AnnRecycledVolume] != string(hp.UID) {
		t.Errorf("meta %+v", pod.ObjectMeta)
	}
	// 10 Gi at 30 s per Gi: 300 s, above the hostPath minimum of 60.
	if *pod.Spec.ActiveDeadlineSeconds != 300 || pod.Spec.RestartPolicy != v1.RestartPolicyNever {
		t.Errorf("deadline %d restart %s", *pod.Spec.ActiveDeadlineSeconds, pod.Spec.RestartPolicy)
	}
	if s := pod.Spec.Volumes[0].HostPath; s == nil || s.Path != "/tmp/hp" || pod.Spec.Containers[0].VolumeMounts[0].MountPath != "/scrub" {
		t.Errorf("volume %+v", pod.Spec.Volumes[0])
	}
	if args := strings.Join(pod.Spec.Containers[0].Args, " "); !strings.Contains(args, "find /scrub -mindepth 1 -delete") {
		t.Errorf("args %q", args)
	}

	nfs := releasedRecyclable("n", "1Gi", func(pv *v1.PersistentVolume) {
		pv.Spec.PersistentVolumeSource = v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "srv", Path: "/export"}}
	})
	pod, err = rs.recyclerPod(nfs)
	if err != nil {
		t.Fatal(err)
	}
	// 1 Gi at 30 s per Gi is below the NFS minimum of 300 s.
	if *pod.Spec.ActiveDeadlineSeconds != 300 || pod.Spec.Volumes[0].NFS == nil || pod.Spec.Volumes[0].NFS.Server != "srv" || pod.Spec.Volumes[0].NFS.Path != "/export" {
		t.Errorf("nfs pod %+v", pod.Spec)
	}

	csi := releasedRecyclable("c", "1Gi", func(pv *v1.PersistentVolume) {
		pv.Spec.PersistentVolumeSource = v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}
	})
	if _, err := rs.recyclerPod(csi); err == nil {
		t.Error("a CSI volume is not recyclable")
	}
}

func TestRecyclerTimeout(t *testing.T) {
	r := recycler{minTimeout: 60, perGiInc: 30}
	for size, want := range map[string]int64{"100Mi": 60, "1Gi": 60, "2Gi": 60, "3Gi": 90, "3500Mi": 90, "10Gi": 300} {
		pv := makePV("x", size)
		pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse(size)
		if got := recyclerTimeout(r, pv); got != want {
			t.Errorf("%s: %d, want %d", size, got, want)
		}
	}
}

func TestRecyclerTemplateFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(`apiVersion: v1
kind: Pod
metadata:
  namespace: scrubbers
spec:
  restartPolicy: Never
  volumes:
  - name: v
  containers:
  - name: c
    image: busybox
    command: ["/bin/sh", "-c", "rm -rf /scrub/*"]
    volumeMounts:
    - name: v
      mountPath: /scrub
`), 0o600); err != nil {
		t.Fatal(err)
	}
	novol := filepath.Join(dir, "novol.yaml")
	if err := os.WriteFile(novol, []byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: c\n    image: busybox\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.RecyclerTemplateHostPath = good
	rs, err := newRecyclers(opts)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := rs.recyclerPod(releasedRecyclable("hp", "1Gi"))
	if err != nil {
		t.Fatal(err)
	}
	if pod.Namespace != "scrubbers" || pod.Spec.Containers[0].Image != "busybox" || pod.Spec.Volumes[0].HostPath == nil || *pod.Spec.ActiveDeadlineSeconds != 60 {
		t.Errorf("pod from the template %+v", pod)
	}
	for _, bad := range []string{novol, filepath.Join(dir, "missing.yaml")} {
		o := DefaultOptions()
		o.RecyclerTemplateNFS = bad
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), FlagRecyclerTemplateNFS) {
			t.Errorf("%s: %v, want an error naming the flag", bad, err)
		}
	}
}

func TestRecycleSucceeded(t *testing.T) {
	api := newAPIServer(releasedRecyclable("y", "1Gi"))
	f := newFixture(t, api)
	f.settle()
	if got := api.pv(t, "y"); got.Status.Phase != v1.VolumeReleased {
		t.Fatalf("phase %s while the recycler runs, want Released; %q", got.Status.Phase, f.events())
	}
	pod := recyclerPodOf(t, api, "y")
	setPodPhase(t, api, pod, v1.PodSucceeded, "")
	f.settle()
	got := api.pv(t, "y")
	if got.Status.Phase != v1.VolumeAvailable || got.Spec.ClaimRef != nil || got.Annotations[storagehelpers.AnnBoundByController] != "" {
		t.Errorf("after recycling: %s %+v %v", got.Status.Phase, got.Spec.ClaimRef, got.Annotations)
	}
	if _, err := api.CoreV1().Pods("default").Get(context.Background(), pod.Name, metav1.GetOptions{}); err == nil {
		t.Error("recycler pod not removed")
	}
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Normal VolumeRecycled Volume recycled") {
		t.Errorf("events %q", ev)
	}
}

func TestRecycleFailed(t *testing.T) {
	api := newAPIServer(releasedRecyclable("y", "1Gi"))
	f := newFixture(t, api)
	f.settle()
	setPodPhase(t, api, recyclerPodOf(t, api, "y"), v1.PodFailed, "scrub failed")
	f.settle()
	got := api.pv(t, "y")
	if got.Status.Phase != v1.VolumeFailed || got.Spec.ClaimRef == nil {
		t.Errorf("after a failed recycle: %s %+v", got.Status.Phase, got.Spec.ClaimRef)
	}
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Warning VolumeFailedRecycle Recycle failed: failed to recycle volume: scrub failed") {
		t.Errorf("events %q", ev)
	}
	if pods, _ := api.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("%d recycler pods left", len(pods.Items))
	}
	// Failed stays Failed: no new recycler Pod.
	f.settle()
	if pods, _ := api.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Error("a Failed PV was recycled again")
	}
}

func TestRecycleTimesOut(t *testing.T) {
	api := newAPIServer(releasedRecyclable("y", "1Gi"))
	f := newFixture(t, api)
	f.settle()
	// The Pod was created long ago by a previous leader, and never scheduled.
	f.c.inFlight.end(api.pv(t, "y").UID)
	pod := recyclerPodOf(t, api, "y")
	pod.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	if _, err := api.CoreV1().Pods("default").Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.settle()
	if got := api.pv(t, "y"); got.Status.Phase != v1.VolumeFailed {
		t.Errorf("phase %s, want Failed", got.Status.Phase)
	}
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Warning VolumeFailedRecycle Recycle failed: failed to recycle volume: recycler pod did not finish within") {
		t.Errorf("events %q", ev)
	}
}

func TestRecycleNotRecyclable(t *testing.T) {
	api := newAPIServer(releasedRecyclable("c", "1Gi", func(pv *v1.PersistentVolume) {
		pv.Spec.PersistentVolumeSource = v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}
	}))
	f := newFixture(t, api)
	f.settle()
	if got := api.pv(t, "c"); got.Status.Phase != v1.VolumeFailed {
		t.Errorf("phase %s", got.Status.Phase)
	}
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Warning VolumeFailedRecycle No recycler plugin found for the volume!") {
		t.Errorf("events %q", ev)
	}
}

// A Pod still using the released claim's name holds the recycle, with upstream's event.
func TestRecycleWaitsForPodsUsingTheVolume(t *testing.T) {
	api := newAPIServer(releasedRecyclable("y", "1Gi"))
	user := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "user"}, Spec: v1.PodSpec{NodeName: "n", Volumes: []v1.Volume{{Name: "v",
		VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "gone-y"}}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning}}
	if _, err := api.CoreV1().Pods(testNS).Create(context.Background(), user, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, api)
	f.settle()
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Normal VolumeFailedRecycle Volume is used by pods: ns/user") {
		t.Errorf("events %q", ev)
	}
	if _, err := api.CoreV1().Pods("default").Get(context.Background(), recyclerPodPrefix+"y", metav1.GetOptions{}); err == nil {
		t.Error("recycler pod created while the volume is in use")
	}
}

// The recycler Pod missing from the cache alone fails nothing (the informer may lag or
// relist); the apiserver's NotFound does.
func TestRecyclerPodGoneOnlyWhenTheAPIServerSaysSo(t *testing.T) {
	api := newAPIServer(releasedRecyclable("y", "1Gi"))
	f := newFixture(t, api)
	f.settle()
	uid := api.pv(t, "y").UID
	f.c.inFlight.get(uid).created = time.Now().Add(-time.Minute) // past the cache lag
	pod := recyclerPodOf(t, api, "y")
	if err := f.c.pods.Delete(pod); err != nil {
		t.Fatal(err)
	}
	_ = f.syncVolume("y")
	if got := api.pv(t, "y"); got.Status.Phase != v1.VolumeReleased {
		t.Fatalf("a cache miss alone made the PV %s, want Released while its recycler runs", got.Status.Phase)
	}
	if err := api.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.syncVolume("y")
	if got := api.pv(t, "y"); got.Status.Phase != v1.VolumeFailed {
		t.Errorf("phase %s after the recycler Pod was deleted, want Failed", got.Status.Phase)
	}
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "recycler pod was deleted") {
		t.Errorf("events %q", ev)
	}
}
