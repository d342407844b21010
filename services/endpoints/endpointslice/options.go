package endpointslice

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/sharding"
)

// Names of this controller, upstream's, one constant each.
const (
	// Name is upstream's name of the controller (--controllers, leader migration; upstream's
	// alias is "endpointslice"), and its controller label in the reconcile metrics.
	Name = "endpointslice-controller"
	// QueueName is upstream's workqueue name: workqueue_*{name="endpoint_slice"}.
	QueueName = "endpoint_slice"
	// ComponentName is upstream's source component of the controller's Events.
	ComponentName = "endpoint-slice-controller"
	// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the slices this
	// controller owns: upstream's, so slices kube-controller-manager wrote are adopted, not
	// duplicated, when a cluster switches over (and back).
	ManagedBy = "endpointslice-controller.k8s.io"
)

// Flag names, upstream's.
const (
	FlagConcurrentSyncs      = "concurrent-service-endpoint-syncs"
	FlagMaxEndpointsPerSlice = "max-endpoints-per-slice"
	FlagBatchPeriod          = "endpointslice-updates-batch-period"
)

// Bounds of --max-endpoints-per-slice, upstream's.
const (
	defaultMaxEndpointsPerSlice = 100
	maxMaxEndpointsPerSlice     = 1000
)

// Options are the EndpointSlice controller's settings.
type Options struct {
	// ConcurrentSyncs is the number of Services whose EndpointSlices are reconciled in
	// parallel.
	ConcurrentSyncs int
	// MaxEndpointsPerSlice caps the endpoints in one EndpointSlice.
	MaxEndpointsPerSlice int
	// BatchPeriod delays the sync a Pod change triggers, so that a burst of Pod changes
	// becomes one write per slice. Zero syncs at once.
	BatchPeriod time.Duration
	// Shard is the binary's shard (set by its Spec, no flag of its own): the controller acts
	// only on keys of its namespaces. A Service missing from the cache deletes nothing here
	// (the garbage collector deletes its slices), so no live read is needed. Zero: unsharded.
	Shard sharding.Shard
}

// DefaultOptions returns upstream's defaults.
func DefaultOptions() Options {
	return Options{ConcurrentSyncs: 5, MaxEndpointsPerSlice: defaultMaxEndpointsPerSlice, BatchPeriod: 0}
}

// Validate reports the first bad value as an *app.FlagError.
func (o Options) Validate() error {
	return app.FirstError(
		app.AtLeast(FlagConcurrentSyncs, o.ConcurrentSyncs, 1),
		app.AtLeast(FlagMaxEndpointsPerSlice, o.MaxEndpointsPerSlice, 1),
		app.AtMost(FlagMaxEndpointsPerSlice, o.MaxEndpointsPerSlice, maxMaxEndpointsPerSlice),
		app.NotNegative(FlagBatchPeriod, o.BatchPeriod),
	)
}

// Flags returns the controller's flags, each bound to its field of o; their defaults are o's
// values. New flag values on every call: app.Run adds environment variables to them in place.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		app.Bound(app.CategoryController, FlagConcurrentSyncs, &o.ConcurrentSyncs,
			"number of Services whose EndpointSlices are synced concurrently; more is faster but costs CPU and API calls"),
		app.Bound(app.CategoryController, FlagMaxEndpointsPerSlice, &o.MaxEndpointsPerSlice,
			"maximum number of endpoints in one EndpointSlice (1-1000); more means fewer slices but larger ones to rewrite on each change"),
		app.Bound(app.CategoryController, FlagBatchPeriod, &o.BatchPeriod,
			"delay before syncing a Service's EndpointSlices after a Pod change, so that several Pod changes make one update; 0 syncs at once"),
	}
}
