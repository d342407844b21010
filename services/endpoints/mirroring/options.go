package mirroring

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/sharding"
)

// Names of this controller, upstream's, one constant each.
const (
	// Name is upstream's name of the controller (--controllers, leader migration; upstream's
	// alias is "endpointslicemirroring"), and its controller label in the reconcile metrics.
	Name = "endpointslice-mirroring-controller"
	// QueueName is upstream's workqueue name: workqueue_*{name="endpoint_slice_mirroring"}.
	QueueName = "endpoint_slice_mirroring"
	// ComponentName is upstream's source component of the controller's Events.
	ComponentName = "endpoint-slice-mirroring-controller"
	// ManagedBy is the endpointslice.kubernetes.io/managed-by value of mirrored slices:
	// upstream's, so slices kube-controller-manager mirrored are adopted, not duplicated.
	ManagedBy = "endpointslicemirroring-controller.k8s.io"
)

// Flag names, upstream's.
const (
	FlagConcurrentSyncs       = "mirroring-concurrent-service-endpoint-syncs"
	FlagMaxEndpointsPerSubset = "mirroring-max-endpoints-per-subset"
	FlagBatchPeriod           = "mirroring-endpointslice-updates-batch-period"
)

// Bounds of the flags, upstream's.
const (
	defaultMaxEndpointsPerSubset = 1000
	maxMaxEndpointsPerSubset     = 1000
	maxConcurrentSyncs           = 50
)

// Options are the mirroring controller's settings.
type Options struct {
	// ConcurrentSyncs is the number of Endpoints mirrored in parallel.
	ConcurrentSyncs int
	// MaxEndpointsPerSubset caps the addresses of one Endpoints subset that are mirrored
	// (and so the endpoints of one mirrored slice); the rest are skipped.
	MaxEndpointsPerSubset int
	// BatchPeriod delays the sync a change to a mirrored slice triggers.
	BatchPeriod time.Duration
	// Shard is the binary's shard (set by its Spec, no flag of its own): the controller acts
	// only on keys of its namespaces, and a Service or Endpoints missing from a sharded
	// cache is taken as deleted only once a live read agrees. The zero value is unsharded.
	Shard sharding.Shard
}

// DefaultOptions returns upstream's defaults.
func DefaultOptions() Options {
	return Options{ConcurrentSyncs: 5, MaxEndpointsPerSubset: defaultMaxEndpointsPerSubset, BatchPeriod: 0}
}

// Validate reports the first bad value as an *app.FlagError.
func (o Options) Validate() error {
	return app.FirstError(
		app.AtLeast(FlagConcurrentSyncs, o.ConcurrentSyncs, 1),
		app.AtMost(FlagConcurrentSyncs, o.ConcurrentSyncs, maxConcurrentSyncs),
		app.AtLeast(FlagMaxEndpointsPerSubset, o.MaxEndpointsPerSubset, 1),
		app.AtMost(FlagMaxEndpointsPerSubset, o.MaxEndpointsPerSubset, maxMaxEndpointsPerSubset),
		app.NotNegative(FlagBatchPeriod, o.BatchPeriod),
	)
}

// Flags returns the controller's flags, each bound to its field of o; their defaults are o's
// values. New flag values on every call: app.Run adds environment variables to them in place.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		app.Bound(app.CategoryController, FlagConcurrentSyncs, &o.ConcurrentSyncs,
			"number of custom Endpoints mirrored to EndpointSlices concurrently (1-50)"),
		app.Bound(app.CategoryController, FlagMaxEndpointsPerSubset, &o.MaxEndpointsPerSubset,
			"maximum number of addresses of one Endpoints subset mirrored to an EndpointSlice (1-1000); the rest are skipped with a TooManyAddressesToMirror event"),
		app.Bound(app.CategoryController, FlagBatchPeriod, &o.BatchPeriod,
			"delay before mirroring an Endpoints again after a change to one of its mirrored EndpointSlices, so that several changes make one update; 0 syncs at once"),
	}
}
