package pvbinder

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/foreign"
)

// SchedulerManager is kube-scheduler's field manager: its volume binding binds volumes of
// WaitForFirstConsumer claims itself (a volume's claimRef and bound-by-controller), by design.
const SchedulerManager = "kube-scheduler"

// foreignWriters notices another writer of the binding this controller owns
// (shared/foreign), typically kube-controller-manager's persistentvolume-binder-controller
// left running: a claim's bind-completed and bound-by-controller annotations, spec.volumeName
// and status.phase, a volume's bound-by-controller annotation and status.phase. A volume's
// claimRef is not watched: administrators write it (reserving a volume for a claim, making a
// Released volume Available again); a second binder's bind writes the volume's annotation and
// phase with it. A write is told by a change from the object's previous version (the
// informer's cache, read in the transform before the cache is updated) whose field another
// field manager now owns: an object's creator owns what it was created with (a pre-bound
// claim, a provisioned volume), and a manager's entry keeps fields it set long ago. Each is
// reported once per episode: an Event on the object, a log line,
// kcm_split_foreign_writer_detected_total{controller="persistentvolume-binder-controller"}.
// It only observes: the controller writes what it would without it.
type foreignWriters struct {
	d *foreign.Detector
	t *foreign.Target
	// volumes and claims are the informers' caches: the versions before the ones being
	// transformed. Set before the informers start; nil observes nothing.
	volumes, claims cache.Store
}

func newForeignWriters(ctx context.Context, rt *app.Runtime) *foreignWriters {
	d := foreign.New(foreign.Options{
		Ours:       []string{ControllerID},
		Ignored:    append(foreign.IgnoredManagers(), SchedulerManager),
		Registerer: rt.ProcessRegistry, // where Spec's ProcessMetrics made the series
		Logger:     klog.FromContext(ctx),
	})
	fw := &foreignWriters{d: d, t: d.Track(&foreign.Target{
		Controller: Name,
		Recorder:   rt.EventRecorder(ctx, ComponentName),
	})}
	// Episodes in progress outlive the term: the next Lease holder continues them. Read
	// here, before the informers start.
	if err := d.KeepBesideLease(ctx, rt.Client.CoreV1().ConfigMaps(rt.LeaseNamespace), rt.LeaseName, ControllerID); err != nil {
		klog.FromContext(ctx).Error(err, "Foreign-writer episodes are not kept for the next Lease holder")
	}
	return fw
}

// transform shows each volume and claim to the detector, then trims objects as
// cacheTransform does (managedFields dropped).
func (f *foreignWriters) transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1.PersistentVolume:
		if prev, ok := previous[*v1.PersistentVolume](f.volumes, o.Name, o); ok {
			f.d.ObserveChange(f.t, o, volumeChanges(prev, o))
		}
	case *v1.PersistentVolumeClaim:
		if prev, ok := previous[*v1.PersistentVolumeClaim](f.claims, o.Namespace+"/"+o.Name, o); ok {
			f.d.ObserveChange(f.t, o, claimChanges(prev, o))
		}
	}
	return cacheTransform(obj)
}

// previous is the cached version of obj, if the cache has one of the same object; none for
// an object first seen (what it was created with is its creator's) or already transformed.
func previous[T interface {
	*v1.PersistentVolume | *v1.PersistentVolumeClaim
	GetUID() types.UID
	GetManagedFields() []metav1.ManagedFieldsEntry
}](store cache.Store, key string, obj T) (T, bool) {
	var zero T
	if store == nil || len(obj.GetManagedFields()) == 0 {
		return zero, false
	}
	cached, ok, err := store.GetByKey(key)
	if err != nil || !ok {
		return zero, false
	}
	prev, ok := cached.(T)
	if !ok || prev.GetUID() != obj.GetUID() {
		return zero, false
	}
	return prev, true
}

func annotationPath(key string) []string { return []string{"metadata", "annotations", key} }

// volumeChanges lists the paths of the binding fields of a volume whose value differs.
func volumeChanges(prev, cur *v1.PersistentVolume) [][]string {
	var out [][]string
	if prev.Annotations[storagehelpers.AnnBoundByController] != cur.Annotations[storagehelpers.AnnBoundByController] {
		out = append(out, annotationPath(storagehelpers.AnnBoundByController))
	}
	if prev.Status.Phase != cur.Status.Phase {
		out = append(out, []string{"status", "phase"})
	}
	return out
}

// claimChanges lists the paths of the binding fields of a claim whose value differs.
func claimChanges(prev, cur *v1.PersistentVolumeClaim) [][]string {
	var out [][]string
	for _, ann := range []string{storagehelpers.AnnBindCompleted, storagehelpers.AnnBoundByController} {
		if prev.Annotations[ann] != cur.Annotations[ann] {
			out = append(out, annotationPath(ann))
		}
	}
	if prev.Spec.VolumeName != cur.Spec.VolumeName {
		out = append(out, []string{"spec", "volumeName"})
	}
	if prev.Status.Phase != cur.Status.Phase {
		out = append(out, []string{"status", "phase"})
	}
	return out
}
