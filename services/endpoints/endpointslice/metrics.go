package endpointslice

import (
	"github.com/prometheus/client_golang/prometheus"
	compbasemetrics "k8s.io/component-base/metrics"
	endpointslicemetrics "k8s.io/endpointslice/metrics"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// libraryMetric is what the library's metrics are: component-base collectors, inert until
// created, whose series can be dropped.
type libraryMetric interface {
	compbasemetrics.Registerable
	Reset()
}

// registerMetrics puts upstream's endpoint_slice_controller_* metrics on reg. The
// Reconciler updates them as package globals of k8s.io/endpointslice/metrics, so each term
// starts them afresh, as every other metric of a term.
func registerMetrics(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	for _, m := range []libraryMetric{
		endpointslicemetrics.EndpointsAddedPerSync,
		endpointslicemetrics.EndpointsRemovedPerSync,
		endpointslicemetrics.EndpointsDesired,
		endpointslicemetrics.NumEndpointSlices,
		endpointslicemetrics.DesiredEndpointSlices,
		endpointslicemetrics.EndpointSliceChanges,
		endpointslicemetrics.EndpointSlicesChangedPerSync,
		endpointslicemetrics.EndpointSliceSyncs,
		endpointslicemetrics.ServicesCountByTrafficDistribution,
	} {
		// Created and registered here rather than through endpointslicemetrics.RegisterMetrics: that goes to component-base's process-global legacyregistry, which would have to be served beside reg, with Go and process collectors that duplicate reg's.
		m.Create(nil)
		m.Reset()
		metrics.Register[prometheus.Collector](reg, m)
	}
}
