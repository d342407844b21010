package pvbinder_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/kcm-split/kcm-split/services/pvbinder"
)

const hostPathProvisioner = "kubernetes.io/host-path"

// With --enable-hostpath-provisioner, a claim of a kubernetes.io/host-path class gets a PV
// of its own (a directory under /tmp/hostpath_pv of the binder's filesystem, here the test
// machine's) and binds it; deleting the claim deletes the directory and the PV. Both
// operations are timed in volume_operation_total_seconds.
func TestHostPathProvisioningRoundTrip(t *testing.T) {
	c, ns, ctrl := withController(t, "--enable-hostpath-provisioner")
	createClass(t, c, ns, hostPathProvisioner, storagev1.VolumeBindingImmediate, false)
	created := createClaim(t, c, claim(ns, "scratch", ns, "3Gi"))
	name := "pvc-" + string(created.UID)
	waitClaim(t, c, ns, "scratch", "bound to its provisioned PV", boundTo(name))
	waitEvent(t, c, ns, "scratch", "ProvisioningSucceeded")
	got := waitPV(t, c, name, "Bound", phase(corev1.VolumeBound))
	t.Cleanup(func() { deletePV(t, c, name) })
	if got.Spec.HostPath == nil || !strings.HasPrefix(got.Spec.HostPath.Path, "/tmp/hostpath_pv/") ||
		got.Annotations[storagehelpers.AnnDynamicallyProvisioned] != hostPathProvisioner ||
		got.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Fatalf("provisioned PV %s", describePV(got))
	}
	size := got.Spec.Capacity[corev1.ResourceStorage]
	if size.String() != "3Gi" || got.Spec.StorageClassName != ns {
		t.Errorf("capacity %s class %q", size.String(), got.Spec.StorageClassName)
	}
	dir := got.Spec.HostPath.Path
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("directory %s: %v", dir, err)
	}
	// The end to end provision is observed once the bind's last write (the claim's status)
	// has returned, so a Bound claim may be seen a moment before it: wait for it.
	series := `volume_operation_total_seconds_count{operation_name="provision",plugin_name="kubernetes.io/host-path"}`
	waitMetric(t, ctrl, series, 1)
	if v := ctrl.Metric(`storage_operation_duration_seconds_count{migrated="false",operation_name="volume_provision",status="success",volume_plugin="kubernetes.io/host-path"}`); v < 1 {
		t.Errorf("storage_operation_duration_seconds for volume_provision = %v", v)
	}

	deleteClaim(t, c, ns, "scratch")
	// The binder deletes the directory, drops its finalizer and deletes the PV; the test
	// plays the pv-protection controller.
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return true, nil
		}
		if p.DeletionTimestamp != nil {
			_, _ = c.CoreV1().PersistentVolumes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
		return false, nil
	})
	if err != nil {
		p, _ := c.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
		t.Fatalf("PV not deleted: %s; events %s", describePV(p), events(t, c, "default", name))
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s still there: %v", dir, err)
	}
	waitMetric(t, ctrl, `volume_operation_total_seconds_count{operation_name="delete",plugin_name="kubernetes.io/host-path"}`, 1)
}

// Without the flag, upstream's host-path plugin refuses: the claim is annotated for it, gets
// ProvisioningFailed and stays Pending, and the failure is counted.
func TestHostPathProvisionerOffByDefault(t *testing.T) {
	c, ns, ctrl := withController(t)
	createClass(t, c, ns, hostPathProvisioner, storagev1.VolumeBindingImmediate, false)
	createClaim(t, c, claim(ns, "scratch", ns, "1Gi"))
	waitEvent(t, c, ns, "scratch", pvbinder.ReasonProvisioningFailed)
	if ev := events(t, c, ns, "scratch"); !strings.Contains(ev, `provisioning in volume plugin "kubernetes.io/host-path" is disabled`) {
		t.Errorf("events: %s", ev)
	}
	got, err := c.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "scratch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.ClaimPending || got.Spec.VolumeName != "" {
		t.Errorf("claim %s %q", got.Status.Phase, got.Spec.VolumeName)
	}
	// The failure is counted just after its event is recorded: wait for the count.
	for _, m := range []string{"volume_operation_total_errors", "volume_operation_errors_total"} {
		waitMetric(t, ctrl, m+`{operation_name="provision",plugin_name="kubernetes.io/host-path"}`, 1)
	}
}

// --enable-dynamic-provisioning=false: a claim no PV fits is handed to no provisioner, as
// upstream: no annotation, no event, Pending; a static PV that arrives later still binds.
//
// Proving a negative needs a point after which the binder has certainly synced the waiting
// claim. A sentinel claim bound after it is that point when the binder has one claim worker
// (the queue is FIFO, so the sentinel's sync comes after the waiting claim's) and when the
// sentinel's PV cannot serve the waiting claim: it is of a class of its own, so the only
// outcome for each claim is the one asserted, whichever syncs first.
func TestDynamicProvisioningOff(t *testing.T) {
	c, ns, _ := withController(t, "--enable-dynamic-provisioning=false", "--"+pvbinder.FlagWorkers+"=1")
	const prov = "example.com/never-asked"
	createClass(t, c, ns, prov, storagev1.VolumeBindingImmediate, false)
	createClaim(t, c, claim(ns, "waits", ns, "1Gi"))
	sentinelClass := ns + "-sentinel"
	createPV(t, c, pv(ns+"-sentinel", sentinelClass, "5Gi"))
	createClaim(t, c, claim(ns, "sentinel", sentinelClass, "5Gi"))
	waitClaim(t, c, ns, "sentinel", "Bound", boundTo(ns+"-sentinel"))
	got, err := c.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "waits", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[storagehelpers.AnnStorageProvisioner] != "" || got.Annotations[storagehelpers.AnnBetaStorageProvisioner] != "" ||
		got.Status.Phase != corev1.ClaimPending || got.Spec.VolumeName != "" {
		t.Errorf("claim handed to a provisioner or bound: %v %s %q", got.Annotations, got.Status.Phase, got.Spec.VolumeName)
	}
	if ev := events(t, c, ns, "waits"); ev != "" {
		t.Errorf("events: %s", ev)
	}
	createPV(t, c, pv(ns+"-static", ns, "1Gi"))
	waitClaim(t, c, ns, "waits", "Bound", boundTo(ns+"-static"))
}

// A claim of a WaitForFirstConsumer class used by a Pod the scheduler has not placed yet
// says which Pod it waits for.
func TestWaitForPodScheduled(t *testing.T) {
	c, ns, _ := withController(t)
	createClass(t, c, ns, "example.com/wffc", storagev1.VolumeBindingWaitForFirstConsumer, false)
	createClaim(t, c, claim(ns, "data", ns, "1Gi"))
	waitEvent(t, c, ns, "data", pvbinder.ReasonWaitForFirstConsumer)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		},
	}
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, ns, "data", pvbinder.ReasonWaitForPodScheduled)
	if ev := events(t, c, ns, "data"); !strings.Contains(ev, "WaitForPodScheduled: waiting for pod web-0 to be scheduled") {
		t.Errorf("events: %s", ev)
	}
}
