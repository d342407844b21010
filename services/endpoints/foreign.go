package endpointscontroller

import (
	"context"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/endpoints/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/projection"
	"github.com/kcm-split/kcm-split/services/endpoints/mirroring"
	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/foreign"
)

// watchForeignWriters has the projection show every Endpoints and EndpointSlice, managedFields
// included, to a foreign-writer detector (shared/foreign) with one target per enabled
// controller: another field manager writing the addresses of an Endpoints or slice one of
// them owns (kube-controller-manager still running the same controller) is reported once per
// episode. It only observes: the controllers write what they would write without it.
func watchForeignWriters(ctx context.Context, rt *app.Runtime, factory informers.SharedInformerFactory, proj *projection.Projection, enabled map[string]bool, managedBy []string) {
	d := foreign.New(foreign.Options{
		Ours:       []string{ControllerID},
		Registerer: rt.ProcessRegistry, // where Spec's ProcessMetrics made the series
		Logger:     klog.FromContext(ctx),
	})
	// Every writer of a Service's Endpoints and slices, kube-controller-manager's as ours,
	// sets this annotation with the addresses.
	triggerTimePath := []string{"metadata", "annotations", v1.EndpointsLastChangeTriggerTime}
	var ep, slices, mirrored *foreign.Target
	if enabled[endpoints.Name] {
		ep = d.Track(&foreign.Target{
			Controller: endpoints.Name,
			Owns:       ownedEndpoints(factory.Core().V1().Services().Lister()),
			Fields:     [][]string{{"subsets"}, triggerTimePath},
			Recorder:   rt.EventRecorder(ctx, endpoints.ComponentName),
		})
		_, _ = factory.Core().V1().Endpoints().Informer().AddEventHandler(d.DeleteHandler())
	}
	sliceFields := [][]string{{"endpoints"}, {"ports"}, triggerTimePath}
	if enabled[endpointslice.Name] {
		slices = d.Track(&foreign.Target{Controller: endpointslice.Name, Fields: sliceFields,
			Recorder: rt.EventRecorder(ctx, endpointslice.ComponentName)})
	}
	if enabled[mirroring.Name] {
		mirrored = d.Track(&foreign.Target{Controller: mirroring.Name, Fields: sliceFields,
			Recorder: rt.EventRecorder(ctx, mirroring.ComponentName)})
	}
	if slices != nil || mirrored != nil {
		_, _ = managedSlices(factory, managedBy).Informer().AddEventHandler(d.DeleteHandler())
	}
	// Episodes in progress outlive the term: the next Lease holder continues them.
	if err := d.KeepBesideLease(ctx, rt.Client.CoreV1().ConfigMaps(rt.LeaseNamespace), rt.LeaseName, ControllerID); err != nil {
		klog.FromContext(ctx).Error(err, "Foreign-writer episodes are not kept for the next Lease holder")
	}
	proj.Observe(func(obj any) {
		switch o := obj.(type) {
		case *v1.Endpoints:
			if ep != nil {
				d.Observe(ep, o)
			}
		case *discovery.EndpointSlice:
			// kube-controller-manager's slices carry the same managed-by values as ours.
			switch o.Labels[discovery.LabelManagedBy] {
			case endpointslice.ManagedBy:
				if slices != nil {
					d.Observe(slices, o)
				}
			case mirroring.ManagedBy:
				if mirrored != nil {
					d.Observe(mirrored, o)
				}
			}
		}
	})
}

// ownedEndpoints tells the Endpoints the endpoints controller writes: those of a Service with
// a selector. Those of a Service without one are written by its owner (and mirrored, not
// owned, by the mirroring controller): their writers are nobody's second owner. A Service not
// in the cache yet owns nothing: at worst a write goes unreported, and a foreign writer writes
// again.
func ownedEndpoints(services corelisters.ServiceLister) func(metav1.Object) bool {
	return func(m metav1.Object) bool {
		svc, err := services.Services(m.GetNamespace()).Get(m.GetName())
		return err == nil && svc.Spec.Selector != nil && svc.Spec.Type != v1.ServiceTypeExternalName
	}
}
