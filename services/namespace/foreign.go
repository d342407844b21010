package namespace

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/informer"
)

// ForeignFinalizer names the writer of a finalize found by its effect: a finalize that
// removes the last finalizer deletes the namespace in the same request, so no managedFields
// ever show who made it.
const ForeignFinalizer = "unknown"

// foreignWriters notices another writer of what this controller owns on a terminating
// namespace (shared/foreign), typically kube-controller-manager's namespace controller left
// running: its conditions written by another field manager (seen in managedFields, in the
// informer transform, before they are dropped), and its finalize made by someone else (a
// namespace deleted while, as last seen, it still had the "kubernetes" finalizer and this
// controller had not finalized it). Each is reported once per episode: an Event, a log line,
// kcm_split_foreign_writer_detected_total{controller="namespace-controller"}. It only
// observes: the controller writes what it would without it.
type foreignWriters struct {
	d *foreign.Detector
	t *foreign.Target
}

func newForeignWriters(ctx context.Context, rt *app.Runtime) *foreignWriters {
	d := foreign.New(foreign.Options{
		Ours:       []string{ControllerID},
		Registerer: rt.ProcessRegistry, // where Spec's ProcessMetrics made the series
		Logger:     klog.FromContext(ctx),
	})
	fw := &foreignWriters{d: d, t: d.Track(&foreign.Target{
		Controller: Name,
		// Only a terminating namespace is this controller's to write.
		Owns:     func(o metav1.Object) bool { return o.GetDeletionTimestamp() != nil },
		Fields:   [][]string{{"status", "conditions"}, {"spec", "finalizers"}},
		Recorder: rt.EventRecorder(ctx, Name),
	})}
	// Episodes in progress outlive the term: the next Lease holder continues them. Read
	// here, before the informers start.
	if err := d.KeepBesideLease(ctx, rt.Client.CoreV1().ConfigMaps(rt.LeaseNamespace), rt.LeaseName, ControllerID); err != nil {
		klog.FromContext(ctx).Error(err, "Foreign-writer episodes are not kept for the next Lease holder")
	}
	return fw
}

// transform is the namespace informer's: each namespace is shown to the detector, then its
// managedFields are dropped (never read otherwise).
func (f *foreignWriters) transform(obj any) (any, error) {
	if ns, ok := obj.(*v1.Namespace); ok {
		f.d.Observe(f.t, ns)
	}
	return informer.DropManagedFields(obj)
}

// finalizedElsewhere reports a namespace deleted with the "kubernetes" finalizer still on it
// as last seen: someone else finalized it.
func (f *foreignWriters) finalizedElsewhere(ns *v1.Namespace, at metav1.Time) {
	f.d.Forget(ns)
	f.d.Report(f.t, ns, foreign.Write{Manager: ForeignFinalizer, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "finalize", At: at.Time})
}

// forget drops what the detector remembers of a deleted namespace.
func (f *foreignWriters) forget(ns *v1.Namespace) { f.d.Forget(ns) }

// markFinalizing records that this controller is about to finalize namespace uid, before the
// request: the namespace's deletion can reach the informer before the response does.
func (c *Controller) markFinalizing(uid types.UID) {
	c.mu.Lock()
	c.finalizing[uid] = true
	c.mu.Unlock()
}
