package pvbinder

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

func hostPathClass(name string) *storagev1.StorageClass {
	return makeClass(name, hostPathPluginName, storagev1.VolumeBindingImmediate, false)
}

// hostPathFixture is a binder with the host-path provisioner on, making its directories
// under a directory of the test's own.
func hostPathFixture(t *testing.T, api *apiServer, enabled bool) *fixture {
	t.Helper()
	opts := DefaultOptions()
	opts.HostPathProvisioner = enabled
	f := newFixtureWith(t, api, opts)
	f.c.hostPathBase = filepath.Join(t.TempDir(), "hostpath_pv")
	return f
}

func TestHostPathProvisioning(t *testing.T) {
	class := hostPathClass("hp")
	api := newAPIServer(class, makeClaim("c", "2Gi", claimClassOpt("hp"), claimModes(v1.ReadWriteOnce, v1.ReadOnlyMany)))
	f := hostPathFixture(t, api, true)
	f.settle()
	claim := api.claim(t, "c")
	if claim.Annotations[storagehelpers.AnnStorageProvisioner] != hostPathPluginName || claim.Annotations[storagehelpers.AnnBetaStorageProvisioner] != hostPathPluginName {
		t.Errorf("claim annotations %v", claim.Annotations)
	}
	name := "pvc-" + string(claim.UID)
	assertBound(t, api, "c", name, true)
	pv := api.pv(t, name)
	if pv.Spec.HostPath == nil || filepath.Dir(pv.Spec.HostPath.Path) != f.c.hostPathBase {
		t.Fatalf("source %+v, want a directory under %s", pv.Spec.PersistentVolumeSource, f.c.hostPathBase)
	}
	if st, err := os.Stat(pv.Spec.HostPath.Path); err != nil || !st.IsDir() {
		t.Errorf("directory %s: %v", pv.Spec.HostPath.Path, err)
	}
	q := pv.Spec.Capacity[v1.ResourceStorage]
	if q.String() != "2Gi" || !slices.Equal(pv.Spec.AccessModes, claim.Spec.AccessModes) || pv.Spec.StorageClassName != "hp" ||
		pv.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimDelete {
		t.Errorf("spec %+v", pv.Spec)
	}
	if pv.Annotations[storagehelpers.AnnDynamicallyProvisioned] != hostPathPluginName || pv.Annotations[AnnCreatedBy] != hostPathCreatedBy ||
		!slices.Equal(pv.Finalizers, []string{storagehelpers.PVDeletionInTreeProtectionFinalizer}) {
		t.Errorf("meta %+v", pv.ObjectMeta)
	}
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Normal ProvisioningSucceeded Successfully provisioned volume "+name+" using kubernetes.io/host-path") ||
		strings.Contains(ev, "ExternalProvisioning") {
		t.Errorf("events %q", ev)
	}
	if n := testutil.CollectAndCount(f.c.metrics.opSeconds); n != 1 {
		t.Errorf("volume_operation_total_seconds series %d, want 1 (provision)", n)
	}
	if n := testutil.CollectAndCount(f.c.metrics.storageOpSeconds); n != 1 {
		t.Errorf("storage_operation_duration_seconds series %d, want 1", n)
	}

	// The claim goes: the PV is Released, its directory deleted, the finalizer removed and
	// the PV deleted; the delete's latency is observed when the PV is gone.
	if err := api.CoreV1().PersistentVolumeClaims(testNS).Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.settle()
	if _, err := os.Stat(pv.Spec.HostPath.Path); !os.IsNotExist(err) {
		t.Errorf("directory still there: %v", err)
	}
	if _, err := api.Tracker().Get(pvResource, "", name); err == nil {
		t.Error("PV not deleted")
	}
	f.c.onVolumeDelete(pv)
	if n := testutil.CollectAndCount(f.c.metrics.opSeconds); n != 2 {
		t.Errorf("volume_operation_total_seconds series %d, want provision and delete", n)
	}
	if n := testutil.CollectAndCount(f.c.metrics.opErrors); n != 0 {
		t.Errorf("%d error series, want none", n)
	}
}

func TestHostPathProvisionerDisabled(t *testing.T) {
	api := newAPIServer(hostPathClass("hp"), makeClaim("c", "1Gi", claimClassOpt("hp")))
	f := hostPathFixture(t, api, false)
	f.settle()
	if got := api.claim(t, "c").Annotations[storagehelpers.AnnStorageProvisioner]; got != hostPathPluginName {
		t.Errorf("claim annotated for %q, want the plugin (as upstream)", got)
	}
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, `Warning ProvisioningFailed Failed to create provisioner: provisioning in volume plugin "kubernetes.io/host-path" is disabled`) {
		t.Errorf("events %q", ev)
	}
	for _, m := range []string{"volume_operation_total_errors", "volume_operation_errors_total"} {
		vec := f.c.metrics.opErrors
		if m == "volume_operation_total_errors" {
			vec = f.c.metrics.opErrorsDeprecated
		}
		if v := testutil.ToFloat64(vec.WithLabelValues(hostPathPluginName, opProvision)); v < 1 {
			t.Errorf("%s{plugin_name=%q,operation_name=provision} = %v", m, hostPathPluginName, v)
		}
	}
	if pvs, _ := api.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{}); len(pvs.Items) != 0 {
		t.Errorf("provisioned %d PVs", len(pvs.Items))
	}
}

func TestHostPathProvisioningRefusals(t *testing.T) {
	withMountOptions := hostPathClass("hp")
	withMountOptions.MountOptions = []string{"ro"}
	for name, tc := range map[string]struct {
		class *storagev1.StorageClass
		claim *v1.PersistentVolumeClaim
		want  string
	}{
		"block": {hostPathClass("hp"), makeClaim("c", "1Gi", claimClassOpt("hp"), claimBlock()),
			`Failed to provision volume with StorageClass "hp": kubernetes.io/host-path does not support block volume provisioning`},
		"mount options": {withMountOptions, makeClaim("c", "1Gi", claimClassOpt("hp")),
			`Mount options are not supported by the provisioner but StorageClass "hp" has mount options [ro]`},
		"data source": {hostPathClass("hp"), makeClaim("c", "1Gi", claimClassOpt("hp"), func(c *v1.PersistentVolumeClaim) {
			c.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
		}), `plugin "kubernetes.io/host-path" is not a CSI plugin. Only CSI plugin can provision a claim with a datasource`},
	} {
		t.Run(name, func(t *testing.T) {
			api := newAPIServer(tc.class, tc.claim)
			f := hostPathFixture(t, api, true)
			f.settle()
			if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Warning ProvisioningFailed "+tc.want) {
				t.Errorf("events %q", ev)
			}
			if pvs, _ := api.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{}); len(pvs.Items) != 0 {
				t.Errorf("provisioned %d PVs", len(pvs.Items))
			}
		})
	}
}

func TestHostPathDeletable(t *testing.T) {
	for path, ok := range map[string]bool{
		"/tmp/hostpath_pv/0a1b":        true,
		"/tmp/hostpath_pv":             false,
		"/tmp/hostpath_pv/":            false,
		"/tmp/hostpath_pv/..":          false,
		"/tmp/hostpath_pv/a/b":         false,
		"/tmp/hostpath_pv/../etc":      false,
		"/tmp/data":                    false,
		"/tmp/hostpath_pvx/a":          false,
		"/var/lib/kubelet/hostpath_pv": false,
	} {
		if err := hostPathDeletable(hostPathBase, path); (err == nil) != ok {
			t.Errorf("%s: %v, want deletable=%v", path, err, ok)
		}
	}
}

// A static hostPath PV with the Delete policy outside the provisioner's directory is never
// deleted: the PV is Failed with an event and the directory stays.
func TestStaticHostPathNotDeleted(t *testing.T) {
	dir := t.TempDir()
	pv := makePV("s", "1Gi", pvPolicy(v1.PersistentVolumeReclaimDelete), pvRef("gone", "uid-gone"), pvPhase(v1.VolumeReleased))
	pv.Spec.HostPath.Path = dir
	api := newAPIServer(pv)
	f := hostPathFixture(t, api, true)
	f.settle()
	if got := api.pv(t, "s"); got.Status.Phase != v1.VolumeFailed {
		t.Errorf("phase %s, want Failed", got.Status.Phase)
	}
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Warning VolumeFailedDelete host_path deleter only supports") {
		t.Errorf("events %q", ev)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("directory deleted: %v", err)
	}
	if v := testutil.ToFloat64(f.c.metrics.opErrors.WithLabelValues(hostPathPluginName, opDelete)); v < 1 {
		t.Errorf("delete errors %v", v)
	}
}
