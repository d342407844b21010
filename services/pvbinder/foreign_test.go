package pvbinder

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

type foreignFixture struct {
	fw       *foreignWriters
	recorder *record.FakeRecorder
	reg      *prometheus.Registry
}

func newForeignFixture(t *testing.T) *foreignFixture {
	t.Helper()
	f := &foreignFixture{recorder: record.NewFakeRecorder(10), reg: prometheus.NewRegistry()}
	d := foreign.New(foreign.Options{Ours: []string{ControllerID}, Ignored: append(foreign.IgnoredManagers(), SchedulerManager),
		Registerer: f.reg, Logger: logr.Discard()})
	f.fw = &foreignWriters{d: d, t: d.Track(&foreign.Target{Controller: Name, Recorder: f.recorder}),
		volumes: cache.NewStore(cache.MetaNamespaceKeyFunc), claims: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	return f
}

func managed(manager, sub, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: sub,
		Time: &metav1.Time{Time: time.Now().Add(time.Second)}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
}

// write shows obj, with entries as its managedFields, to the transform and caches what it
// returns, as the informer does.
func (f *foreignFixture) write(t *testing.T, obj metav1.Object, entries ...metav1.ManagedFieldsEntry) {
	t.Helper()
	obj.SetManagedFields(entries)
	out, err := f.fw.transform(obj)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.(metav1.Object).GetManagedFields()) != 0 {
		t.Fatal("the transform kept managedFields in the cache")
	}
	store := f.fw.claims
	if _, ok := out.(*v1.PersistentVolume); ok {
		store = f.fw.volumes
	}
	if err := store.Add(out); err != nil {
		t.Fatal(err)
	}
}

func (f *foreignFixture) count(t *testing.T) float64 {
	t.Helper()
	return fixtures.Counter(t, f.reg, "kcm_split_foreign_writer_detected_total")
}

func (f *foreignFixture) events() []string { return fixtures.Events(f.recorder) }

const (
	claimCreated  = `{"f:spec":{"f:volumeName":{},"f:resources":{"f:requests":{"f:storage":{}}}}}`
	claimBound    = `{"f:metadata":{"f:annotations":{"f:pv.kubernetes.io/bind-completed":{}}}}`
	phaseField    = `{"f:status":{"f:phase":{}}}`
	claimResized  = `{"f:spec":{"f:resources":{"f:requests":{"f:storage":{}}}}}`
	volumeBoundBy = `{"f:metadata":{"f:annotations":{"f:pv.kubernetes.io/bound-by-controller":{}}},"f:spec":{"f:claimRef":{}}}`
)

// TestForeignClaimBindingIsReported: a claim's binding written by another field manager is
// reported once; what a claim was created with, its creator's later writes of other fields
// and this controller's writes are not.
func TestForeignClaimBindingIsReported(t *testing.T) {
	f := newForeignFixture(t)
	pvc := makeClaim("pre", "1Gi")
	pvc.Spec.VolumeName = "pv-pre"
	creator := managed("kubectl-create", "", claimCreated)
	f.write(t, pvc.DeepCopy(), creator)
	// Bound by this controller.
	metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, storagehelpers.AnnBindCompleted, "yes")
	f.write(t, pvc.DeepCopy(), creator, managed(ControllerID, "", claimBound))
	pvc.Status.Phase = v1.ClaimBound
	f.write(t, pvc.DeepCopy(), creator, managed(ControllerID, "", claimBound), managed(ControllerID, "status", phaseField))
	// Resized by its creator, whose entry still owns spec.volumeName and moves in time.
	pvc.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("2Gi")
	f.write(t, pvc.DeepCopy(), managed("kubectl-create", "", claimCreated), managed(ControllerID, "", claimBound), managed(ControllerID, "status", phaseField))
	if n := f.count(t); n != 0 {
		t.Fatalf("counter %v, want 0: %q", n, f.events())
	}

	// kube-controller-manager binds another claim.
	other := makeClaim("other", "1Gi")
	f.write(t, other.DeepCopy(), managed("kubectl-create", "", claimResized))
	other.Spec.VolumeName = "pv-other"
	metav1.SetMetaDataAnnotation(&other.ObjectMeta, storagehelpers.AnnBindCompleted, "yes")
	f.write(t, other.DeepCopy(), managed("kubectl-create", "", claimResized),
		managed("kube-controller-manager", "", `{"f:metadata":{"f:annotations":{"f:pv.kubernetes.io/bind-completed":{}}},"f:spec":{"f:volumeName":{}}}`))
	if n := f.count(t); n != 1 {
		t.Fatalf("counter %v, want 1", n)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], foreign.Reason) || !strings.Contains(ev[0], "kube-controller-manager") {
		t.Fatalf("events %q, want one %s naming kube-controller-manager", ev, foreign.Reason)
	}
}

// TestForeignVolumeBindingIsReported: a volume's phase written by another field manager is
// reported; kube-scheduler's bind of a volume and this controller's writes are not.
func TestForeignVolumeBindingIsReported(t *testing.T) {
	f := newForeignFixture(t)
	pv := makePV("pv1", "1Gi")
	f.write(t, pv.DeepCopy(), managed("csi-provisioner", "", volumeBoundBy))
	metav1.SetMetaDataAnnotation(&pv.ObjectMeta, storagehelpers.AnnBoundByController, "yes")
	f.write(t, pv.DeepCopy(), managed(SchedulerManager, "", volumeBoundBy))
	pv.Status.Phase = v1.VolumeBound
	f.write(t, pv.DeepCopy(), managed(SchedulerManager, "", volumeBoundBy), managed(ControllerID, "status", phaseField))
	if n := f.count(t); n != 0 {
		t.Fatalf("counter %v, want 0: %q", n, f.events())
	}
	pv.Status.Phase = v1.VolumeReleased
	f.write(t, pv.DeepCopy(), managed(SchedulerManager, "", volumeBoundBy), managed("kube-controller-manager", "status", phaseField))
	if n := f.count(t); n != 1 {
		t.Fatalf("counter %v, want 1", n)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], "kube-controller-manager") {
		t.Fatalf("events %q, want one naming kube-controller-manager", ev)
	}
}
