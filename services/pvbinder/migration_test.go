package pvbinder

import (
	"maps"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

// upstreamMigrated is what kube-controller-manager v1.36's CSIMigratedPluginManager reports
// as migrated, with the driver csi-translation-lib names: a change in the library's set shows
// here.
var upstreamMigrated = map[string]string{
	"kubernetes.io/aws-ebs":         "ebs.csi.aws.com",
	"kubernetes.io/gce-pd":          "pd.csi.storage.gke.io",
	"kubernetes.io/azure-disk":      "disk.csi.azure.com",
	"kubernetes.io/azure-file":      "file.csi.azure.com",
	"kubernetes.io/cinder":          "cinder.csi.openstack.org",
	"kubernetes.io/vsphere-volume":  "csi.vsphere.vmware.com",
	"kubernetes.io/portworx-volume": "pxd.portworx.com",
}

func TestCSIMigrationDriverFor(t *testing.T) {
	m := newCSIMigration()
	for plugin, want := range upstreamMigrated {
		t.Run(plugin, func(t *testing.T) {
			if got, ok := m.driverFor(plugin); !ok || got != want {
				t.Errorf("driverFor = %q, %v; want %q, true", got, ok, want)
			}
			if got := m.provisionerName(plugin); got != want {
				t.Errorf("provisionerName = %q, want %q", got, want)
			}
		})
	}
	for _, plugin := range []string{"", "kubernetes.io/rbd", "kubernetes.io/host-path", "kubernetes.io/no-provisioner",
		"kubernetes.io/glusterfs", "example.com/p", "ebs.csi.aws.com", "pd.csi.storage.gke.io"} {
		t.Run("not migrated "+plugin, func(t *testing.T) {
			if got, ok := m.driverFor(plugin); ok {
				t.Errorf("driverFor = %q, true; want not migrated", got)
			}
			if got := m.provisionerName(plugin); got != plugin {
				t.Errorf("provisionerName = %q, want the class's own %q", got, plugin)
			}
		})
	}
}

func TestMigratedClaim(t *testing.T) {
	const (
		ga, beta, to = storagehelpers.AnnStorageProvisioner, storagehelpers.AnnBetaStorageProvisioner, storagehelpers.AnnMigratedTo
	)
	tests := []struct {
		name string
		ann  map[string]string
		want map[string]string // nil: no change
	}{
		{"no provisioner", map[string]string{"a": "b"}, nil},
		{"no provisioner keeps a migrated-to", map[string]string{to: "ebs.csi.aws.com"}, nil},
		{"in-tree migrated (GA key)", map[string]string{ga: "kubernetes.io/aws-ebs"},
			map[string]string{ga: "kubernetes.io/aws-ebs", to: "ebs.csi.aws.com"}},
		{"in-tree migrated (beta key only)", map[string]string{beta: "kubernetes.io/gce-pd"},
			map[string]string{beta: "kubernetes.io/gce-pd", to: "pd.csi.storage.gke.io"}},
		{"GA key decides over beta", map[string]string{ga: "ebs.csi.aws.com", beta: "kubernetes.io/aws-ebs"}, nil},
		{"wrong driver corrected", map[string]string{ga: "kubernetes.io/cinder", to: "other"},
			map[string]string{ga: "kubernetes.io/cinder", to: "cinder.csi.openstack.org"}},
		{"already right", map[string]string{ga: "kubernetes.io/azure-disk", to: "disk.csi.azure.com"}, nil},
		{"CSI driver name: migrated-to dropped", map[string]string{ga: "ebs.csi.aws.com", to: "ebs.csi.aws.com"},
			map[string]string{ga: "ebs.csi.aws.com"}},
		{"external provisioner", map[string]string{ga: "example.com/p", beta: "example.com/p"}, nil},
		{"in-tree, not migrated", map[string]string{ga: "kubernetes.io/rbd"}, nil},
	}
	m := newCSIMigration()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claim := makeClaim("c", "1Gi")
			claim.Annotations = maps.Clone(tt.ann)
			before := maps.Clone(claim.Annotations)
			got := m.migratedClaim(claim)
			if !maps.Equal(claim.Annotations, before) {
				t.Fatal("the claim passed in was changed")
			}
			switch {
			case tt.want == nil && got != nil:
				t.Errorf("changed to %v, want no change", got.Annotations)
			case tt.want != nil && got == nil:
				t.Errorf("no change, want %v", tt.want)
			case tt.want != nil && !maps.Equal(got.Annotations, tt.want):
				t.Errorf("annotations %v, want %v", got.Annotations, tt.want)
			}
		})
	}
}

func TestMigratedVolume(t *testing.T) {
	const (
		by, to  = storagehelpers.AnnDynamicallyProvisioned, storagehelpers.AnnMigratedTo
		inTree  = storagehelpers.PVDeletionInTreeProtectionFinalizer
		extern  = storagehelpers.PVDeletionProtectionFinalizer
		protect = "kubernetes.io/pv-protection"
	)
	tests := []struct {
		name       string
		ann        map[string]string
		finalizers []string
		policy     v1.PersistentVolumeReclaimPolicy
		wantAnn    map[string]string // nil with wantFin nil: no change
		wantFin    []string
	}{
		{"static in-tree source: left alone, as upstream", nil, nil, v1.PersistentVolumeReclaimDelete, nil, nil},
		{"static with a migrated-to: kept", map[string]string{to: "ebs.csi.aws.com"}, nil, v1.PersistentVolumeReclaimDelete, nil, nil},
		{"provisioned by aws-ebs", map[string]string{by: "kubernetes.io/aws-ebs"}, nil, v1.PersistentVolumeReclaimDelete,
			map[string]string{by: "kubernetes.io/aws-ebs", to: "ebs.csi.aws.com"}, nil},
		{"in-tree finalizer removed, others kept", map[string]string{by: "kubernetes.io/vsphere-volume"}, []string{protect, inTree, extern}, v1.PersistentVolumeReclaimDelete,
			map[string]string{by: "kubernetes.io/vsphere-volume", to: "csi.vsphere.vmware.com"}, []string{protect, extern}},
		{"only the finalizer to remove", map[string]string{by: "kubernetes.io/azure-file", to: "file.csi.azure.com"}, []string{inTree}, v1.PersistentVolumeReclaimRetain,
			map[string]string{by: "kubernetes.io/azure-file", to: "file.csi.azure.com"}, nil},
		{"already right", map[string]string{by: "kubernetes.io/portworx-volume", to: "pxd.portworx.com"}, []string{extern}, v1.PersistentVolumeReclaimDelete, nil, nil},
		{"external provisioner: stale migrated-to dropped", map[string]string{by: "example.com/p", to: "ebs.csi.aws.com"}, nil, v1.PersistentVolumeReclaimDelete,
			map[string]string{by: "example.com/p"}, nil},
		{"external provisioner", map[string]string{by: "example.com/p"}, []string{extern}, v1.PersistentVolumeReclaimDelete, nil, nil},
		// No in-tree deleter exists in this binary: the in-tree finalizer is neither added
		// nor removed for a plugin that is not migrated.
		{"in-tree, not migrated", map[string]string{by: "kubernetes.io/rbd"}, []string{inTree}, v1.PersistentVolumeReclaimDelete, nil, nil},
	}
	m := newCSIMigration()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pv := makePV("p", "1Gi", pvPolicy(tt.policy))
			pv.Annotations = maps.Clone(tt.ann)
			pv.Finalizers = slices.Clone(tt.finalizers)
			got := m.migratedVolume(pv)
			if !maps.Equal(pv.Annotations, tt.ann) || !slices.Equal(pv.Finalizers, tt.finalizers) {
				t.Fatal("the PV passed in was changed")
			}
			if tt.wantAnn == nil && tt.wantFin == nil {
				if got != nil {
					t.Errorf("changed to %v %v, want no change", got.Annotations, got.Finalizers)
				}
				return
			}
			if got == nil {
				t.Fatalf("no change, want %v %v", tt.wantAnn, tt.wantFin)
			}
			if !maps.Equal(got.Annotations, tt.wantAnn) || !slices.Equal(got.Finalizers, tt.wantFin) {
				t.Errorf("got %v %v, want %v %v", got.Annotations, got.Finalizers, tt.wantAnn, tt.wantFin)
			}
		})
	}
}

// TestProvisioningMigratedPlugins: a claim of a class of a migrated in-tree plugin is
// handed to the plugin's CSI driver, with no ProvisioningFailed.
func TestProvisioningMigratedPlugins(t *testing.T) {
	for plugin, driver := range upstreamMigrated {
		t.Run(plugin, func(t *testing.T) {
			api := newAPIServer(makeClass("old", plugin, storagev1.VolumeBindingImmediate, false), makeClaim("c", "1Gi", claimClassOpt("old")))
			f := newFixture(t, api)
			f.settle()
			c := api.claim(t, "c")
			if c.Annotations[storagehelpers.AnnStorageProvisioner] != driver || c.Annotations[storagehelpers.AnnBetaStorageProvisioner] != driver {
				t.Errorf("annotations %v, want both provisioner keys %s", c.Annotations, driver)
			}
			if _, ok := c.Annotations[storagehelpers.AnnMigratedTo]; ok {
				t.Errorf("migrated-to on a claim for the CSI driver itself: %v", c.Annotations)
			}
			ev := strings.Join(f.events(), "\n")
			if strings.Contains(ev, ReasonProvisioningFailed) || !strings.Contains(ev, "Normal ExternalProvisioning Waiting for a volume to be created either by the external provisioner '"+driver+"'") {
				t.Errorf("events %q", ev)
			}
			before, _ := api.counts()
			f.settle()
			if after, _ := api.counts(); after != before {
				t.Errorf("%d writes on a resync", after-before)
			}
		})
	}
	t.Run("claim annotated for the in-tree name before migration", func(t *testing.T) {
		api := newAPIServer(makeClass("old", "kubernetes.io/aws-ebs", storagev1.VolumeBindingImmediate, false),
			makeClaim("c", "1Gi", claimClassOpt("old"),
				claimAnn(storagehelpers.AnnStorageProvisioner, "kubernetes.io/aws-ebs"), claimAnn(storagehelpers.AnnBetaStorageProvisioner, "kubernetes.io/aws-ebs")))
		f := newFixture(t, api)
		f.settle()
		c := api.claim(t, "c")
		want := map[string]string{storagehelpers.AnnStorageProvisioner: "ebs.csi.aws.com", storagehelpers.AnnBetaStorageProvisioner: "ebs.csi.aws.com"}
		if !maps.Equal(c.Annotations, want) {
			t.Errorf("annotations %v, want %v", c.Annotations, want)
		}
	})
	t.Run("bound claim of a migrated plugin", func(t *testing.T) {
		api := newAPIServer(
			makeClaim("c", "1Gi", claimVolume("a"), claimPhase(v1.ClaimBound), claimAnn(storagehelpers.AnnBindCompleted, "yes"),
				claimAnn(storagehelpers.AnnStorageProvisioner, "kubernetes.io/gce-pd")),
			makePV("a", "1Gi", pvRef("c", claimUID("c")), pvPhase(v1.VolumeBound)))
		f := newFixture(t, api)
		f.settle()
		c := api.claim(t, "c")
		if c.Annotations[storagehelpers.AnnMigratedTo] != "pd.csi.storage.gke.io" || c.Status.Phase != v1.ClaimBound {
			t.Errorf("annotations %v, phase %s", c.Annotations, c.Status.Phase)
		}
	})
}
