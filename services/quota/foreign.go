package quota

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/informer"
)

// foreignWriters returns the quotas' informer transform: each ResourceQuota, managedFields
// included, is shown to a foreign-writer detector (shared/foreign) before its managedFields
// are dropped, so that another field manager writing status.hard or status.used (the
// resourcequota controller of a kube-controller-manager left running) is reported once per
// episode. The API server's own charges of status.used at admission are its by design and
// never count. The detector only observes: the controller writes what it would without it.
// Register the returned handler on the quotas' informer: it forgets deleted quotas.
func foreignWriters(ctx context.Context, rt *app.Runtime) (cache.TransformFunc, cache.ResourceEventHandler) {
	d := foreign.New(foreign.Options{
		Ours:       []string{ControllerID},
		Registerer: rt.ProcessRegistry, // where Spec's ProcessMetrics made the series
		Logger:     klog.FromContext(ctx),
	})
	t := d.Track(&foreign.Target{
		Controller: Name,
		Fields:     [][]string{{"status", "hard"}, {"status", "used"}},
		Recorder:   rt.EventRecorder(ctx, Name),
	})
	// Episodes in progress outlive the term: the next Lease holder continues them.
	if err := d.KeepBesideLease(ctx, rt.Client.CoreV1().ConfigMaps(rt.LeaseNamespace), rt.LeaseName, ControllerID); err != nil {
		klog.FromContext(ctx).Error(err, "Foreign-writer episodes are not kept for the next Lease holder")
	}
	transform := func(obj any) (any, error) {
		if rq, ok := obj.(*v1.ResourceQuota); ok {
			d.Observe(t, rq)
		}
		return informer.DropManagedFields(obj)
	}
	return transform, d.DeleteHandler()
}
