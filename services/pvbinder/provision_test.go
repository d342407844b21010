package pvbinder

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

func TestDynamicProvisioningOff(t *testing.T) {
	for _, prov := range []string{"example.com/p", hostPathPluginName} {
		t.Run(prov, func(t *testing.T) {
			api := newAPIServer(makeClass("c", prov, storagev1.VolumeBindingImmediate, false), makeClaim("c", "1Gi", claimClassOpt("c")))
			opts := DefaultOptions()
			opts.DynamicProvisioning, opts.HostPathProvisioner = false, true
			f := newFixtureWith(t, api, opts)
			f.settle()
			got := api.claim(t, "c")
			if got.Annotations != nil || got.Status.Phase != v1.ClaimPending {
				t.Errorf("claim handed to a provisioner with dynamic provisioning off: %+v", got.ObjectMeta)
			}
			if writes, _ := api.counts(); writes != 0 {
				t.Errorf("%d writes, want none", writes)
			}
			if ev := f.events(); len(ev) != 0 {
				t.Errorf("events %q, want none", ev)
			}
			if pvs, _ := api.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{}); len(pvs.Items) != 0 {
				t.Errorf("provisioned %d PVs", len(pvs.Items))
			}
		})
	}
}

// External provisioning is timed too, as upstream: from the first attempt until the claim
// is bound, under the provisioner's name.
func TestExternalProvisionLatency(t *testing.T) {
	api := newAPIServer(makeClass("ext", "example.com/p", storagev1.VolumeBindingImmediate, false), makeClaim("c", "1Gi", claimClassOpt("ext")))
	f := newFixture(t, api)
	f.settle()
	if n := testutil.CollectAndCount(f.c.metrics.opSeconds); n != 0 {
		t.Fatalf("%d latency series before the bind", n)
	}
	pv := makePV("pvc-1", "1Gi", pvClass("ext"), pvRef("c", claimUID("c")), pvPhase(v1.VolumePending), pvAnn(storagehelpers.AnnDynamicallyProvisioned, "example.com/p"))
	if _, err := api.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.settle()
	if got, err := testutil.GatherAndCount(f.registry, "volume_operation_total_seconds"); err != nil || got != 1 {
		t.Errorf("series %d (%v), want 1", got, err)
	}
	mfs, _ := f.registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "volume_operation_total_seconds" {
			continue
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["plugin_name"] != "example.com/p" || labels["operation_name"] != "provision" || mf.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
			t.Errorf("series %v", mf.GetMetric()[0])
		}
	}
}

func TestProvisioningAndWaitForFirstConsumer(t *testing.T) {
	t.Run("external provisioner", func(t *testing.T) {
		api := newAPIServer(makeClass("ext", "example.com/p", storagev1.VolumeBindingImmediate, false), makeClaim("c", "1Gi", claimClassOpt("ext")))
		f := newFixture(t, api)
		f.settle()
		c := api.claim(t, "c")
		if c.Annotations[storagehelpers.AnnStorageProvisioner] != "example.com/p" || c.Annotations[storagehelpers.AnnBetaStorageProvisioner] != "example.com/p" {
			t.Errorf("annotations %v", c.Annotations)
		}
		if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Normal ExternalProvisioning Waiting for a volume to be created either by the external provisioner 'example.com/p'") {
			t.Errorf("events %q", ev)
		}
		// The provisioner creates a PV pre-bound to the claim.
		pv := makePV("pvc-1", "1Gi", pvClass("ext"), pvRef("c", c.UID), pvPhase(v1.VolumePending), pvAnn(storagehelpers.AnnDynamicallyProvisioned, "example.com/p"))
		if _, err := api.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.settle()
		assertBound(t, api, "c", "pvc-1", false)
	})
	t.Run("in-tree provisioner", func(t *testing.T) {
		api := newAPIServer(makeClass("old", "kubernetes.io/no-provisioner", storagev1.VolumeBindingImmediate, false), makeClaim("c", "1Gi", claimClassOpt("old")))
		f := newFixture(t, api)
		f.settle()
		if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Warning ProvisioningFailed") {
			t.Errorf("events %q", ev)
		}
	})
	t.Run("wait for first consumer", func(t *testing.T) {
		api := newAPIServer(makeClass("wffc", "example.com/p", storagev1.VolumeBindingWaitForFirstConsumer, false),
			makeClaim("c", "1Gi", claimClassOpt("wffc")), makePV("a", "1Gi", pvClass("wffc")))
		f := newFixture(t, api)
		f.settle()
		c := api.claim(t, "c")
		if c.Spec.VolumeName != "" || c.Annotations[storagehelpers.AnnStorageProvisioner] != "" {
			t.Fatalf("did not wait: %+v", c)
		}
		if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "Normal WaitForFirstConsumer waiting for first consumer to be created before binding") {
			t.Errorf("events %q", ev)
		}
		// The scheduler picks a node.
		c = c.DeepCopy()
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, storagehelpers.AnnSelectedNode, "node-1")
		if _, err := api.CoreV1().PersistentVolumeClaims(testNS).Update(context.Background(), c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.settle()
		if got := api.claim(t, "c").Annotations[storagehelpers.AnnStorageProvisioner]; got != "example.com/p" {
			t.Errorf("storage-provisioner %q after selected-node", got)
		}
		if pv := api.pv(t, "a"); pv.Spec.ClaimRef != nil {
			t.Error("the binder chose a PV for a WaitForFirstConsumer claim; that is the scheduler's job")
		}
	})
}

func TestDefaultClassAppliedRetroactively(t *testing.T) {
	api := newAPIServer(makeClaim("c", "1Gi", claimNoClass()), makeClaim("empty", "1Gi"))
	f := newFixture(t, api)
	f.settle()
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "FailedBinding no persistent volumes available for this claim and no storage class is set") {
		t.Errorf("events %q", ev)
	}
	if _, err := api.StorageV1().StorageClasses().Create(context.Background(), makeClass("std", "example.com/p", storagev1.VolumeBindingImmediate, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.settle()
	if c := api.claim(t, "c"); c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != "std" {
		t.Errorf("class %v, want std", c.Spec.StorageClassName)
	}
	if c := api.claim(t, "empty"); *c.Spec.StorageClassName != "" {
		t.Error("a claim that chose no class (\"\") got the default")
	}
	if got := testutil.ToFloat64(f.c.metrics.retroactive); got != 1 {
		t.Errorf("retroactive_storageclass_total %v", got)
	}
}

// TestBindsDoNotQueueProvisioningClaims: a claim handed to its provisioner (or waiting for its
// first consumer) is brought back by the provisioner's PV or the scheduler, not by other
// claims' binds, which would only repeat its event; a claim of a class with no provisioner
// keeps waiting for a static PV.
func TestBindsDoNotQueueProvisioningClaims(t *testing.T) {
	api := newAPIServer(
		makeClass("ext", "example.com/p", storagev1.VolumeBindingImmediate, false),
		makeClass("wffc", "example.com/p", storagev1.VolumeBindingWaitForFirstConsumer, false),
		makeClaim("dyn", "1Gi", claimClassOpt("ext")),
		makeClaim("late", "1Gi", claimClassOpt("wffc")),
		makeClaim("manual", "1Gi", claimClassOpt("manual")))
	f := newFixture(t, api)
	for _, n := range []string{"dyn", "late", "manual"} {
		if err := f.syncClaim(n); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.c.waiting.takeOldest(nil); got != testNS+"/manual" {
		t.Errorf("waiting: %q, want only the claim of the class without a provisioner", got)
	}
	if got := f.c.waiting.takeOldest(nil); got != "" {
		t.Errorf("also waiting: %q", got)
	}
}
