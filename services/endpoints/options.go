package endpoints

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/app"
)

// Names this binary is known by. They are the single source of truth for the binary,
// the Lease, the queues' metrics labels, the Helm chart key and what other components see.
const (
	// ControllerID is the binary name and the default Lease name.
	ControllerID = "endpoints-controller"
	// QueueName is the workqueue name, upstream's, so workqueue_*{name="endpoint"} queries
	// written for kube-controller-manager keep working.
	QueueName = "endpoint"
	// ComponentName is upstream's name for this controller: the source component of the
	// Events it writes and the value of LabelManagedBy on the Endpoints it owns.
	ComponentName = "endpoint-controller"
	// DefaultPort is the default --secure-port: HTTPS metrics and health.
	DefaultPort = 10281
)

// Names of the EndpointSlice controller this binary also runs, upstream's.
const (
	// SliceQueueName is upstream's workqueue name: workqueue_*{name="endpoint_slice"}.
	SliceQueueName = "endpoint_slice"
	// SliceComponentName is the source component of the EndpointSlice controller's Events.
	SliceComponentName = "endpoint-slice-controller"
	// SliceManagedBy is the endpointslice.kubernetes.io/managed-by value of the slices this
	// binary owns: upstream's, so slices kube-controller-manager wrote are adopted, not
	// duplicated, when a cluster switches over (and back).
	SliceManagedBy = "endpointslice-controller.k8s.io"
)

// Names of the EndpointSlice mirroring controller this binary also runs, upstream's.
const (
	// MirrorQueueName is upstream's workqueue name: workqueue_*{name="endpoint_slice_mirroring"}.
	MirrorQueueName = "endpoint_slice_mirroring"
	// MirrorComponentName is the source component of the mirroring controller's Events.
	MirrorComponentName = "endpoint-slice-mirroring-controller"
	// MirrorManagedBy is the endpointslice.kubernetes.io/managed-by value of mirrored slices:
	// upstream's, so slices kube-controller-manager mirrored are adopted, not duplicated.
	MirrorManagedBy = "endpointslicemirroring-controller.k8s.io"
)

// Controller names for --controllers, kube-controller-manager's; each also has upstream's alias.
const (
	EndpointsController     = "endpoints-controller"
	EndpointSliceController = "endpointslice-controller"
	// EndpointSliceMirroringController mirrors custom Endpoints into EndpointSlices.
	EndpointSliceMirroringController = "endpointslice-mirroring-controller"
)

// knownControllers are the controllers this binary runs, all on by default, with upstream's
// aliases.
var knownControllers = []app.ControllerName{
	{Name: EndpointsController, Aliases: []string{"endpoint"}},
	{Name: EndpointSliceController, Aliases: []string{"endpointslice"}},
	{Name: EndpointSliceMirroringController, Aliases: []string{"endpointslicemirroring"}},
}

// Flag names, upstream's.
const (
	FlagControllers          = "controllers"
	FlagConcurrentSyncs      = "concurrent-endpoint-syncs"
	FlagBatchPeriod          = "endpoint-updates-batch-period"
	FlagConcurrentSliceSyncs = "concurrent-service-endpoint-syncs"
	FlagMaxEndpointsPerSlice = "max-endpoints-per-slice"
	FlagSliceBatchPeriod     = "endpointslice-updates-batch-period"

	FlagMirroringConcurrentSyncs       = "mirroring-concurrent-service-endpoint-syncs"
	FlagMirroringMaxEndpointsPerSubset = "mirroring-max-endpoints-per-subset"
	FlagMirroringBatchPeriod           = "mirroring-endpointslice-updates-batch-period"
)

// Bounds of --max-endpoints-per-slice, upstream's.
const (
	defaultMaxEndpointsPerSlice = 100
	maxMaxEndpointsPerSlice     = 1000
)

// Bounds of the mirroring flags, upstream's.
const (
	defaultMirroringMaxEndpointsPerSubset = 1000
	maxMirroringMaxEndpointsPerSubset     = 1000
	maxMirroringConcurrentSyncs           = 50
)

// Default client budget of this binary: the defaults of --kube-api-qps and --kube-api-burst.
const (
	// DefaultQPS is what upstream gives the three controllers this binary replaces: in
	// kube-controller-manager endpoints-controller, endpointslice-controller and
	// endpointslice-mirroring-controller each have a client of their own at 20 QPS / 30
	// burst. Sharing one budget of 20 would make a rollout's EndpointSlice writes delay its
	// Endpoints writes; pooled, the budget mirroring leaves idle (most clusters mirror
	// nothing) serves the other two, and the apiserver never sees more than upstream's sum.
	DefaultQPS = 60
	// DefaultBurst is the three controllers' bursts together.
	DefaultBurst = 90
)

// Options are the controllers' own settings.
type Options struct {
	// Controllers is --controllers as given: upstream's syntax, a comma-separated list of
	// names to enable, "-name" to disable, "*" for every controller on by default.
	Controllers string
	// ConcurrentSyncs is the number of Services whose Endpoints are reconciled in parallel.
	ConcurrentSyncs int
	// BatchPeriod delays the sync a Pod change triggers, so that a burst of Pod changes
	// (a rollout, a node going away) becomes one Endpoints write per Service instead of
	// one per Pod. Service changes are never delayed. Zero syncs at once.
	BatchPeriod time.Duration
	// ConcurrentSliceSyncs is the number of Services whose EndpointSlices are reconciled in
	// parallel.
	ConcurrentSliceSyncs int
	// MaxEndpointsPerSlice caps the endpoints in one EndpointSlice.
	MaxEndpointsPerSlice int
	// SliceBatchPeriod is BatchPeriod for EndpointSlices.
	SliceBatchPeriod time.Duration
	// MirroringConcurrentSyncs is the number of Endpoints mirrored in parallel.
	MirroringConcurrentSyncs int
	// MirroringMaxEndpointsPerSubset caps the addresses of one Endpoints subset that are
	// mirrored (and so the endpoints of one mirrored slice); the rest are skipped.
	MirroringMaxEndpointsPerSubset int
	// MirroringBatchPeriod delays the sync a change to a mirrored slice triggers.
	MirroringBatchPeriod time.Duration
}

// DefaultOptions returns upstream's defaults.
func DefaultOptions() Options {
	return Options{
		Controllers:          "*",
		ConcurrentSyncs:      5,
		BatchPeriod:          0,
		ConcurrentSliceSyncs: 5,
		MaxEndpointsPerSlice: defaultMaxEndpointsPerSlice,
		SliceBatchPeriod:     0,

		MirroringConcurrentSyncs:       5,
		MirroringMaxEndpointsPerSubset: defaultMirroringMaxEndpointsPerSubset,
		MirroringBatchPeriod:           0,
	}
}

// Validate reports the first bad value as an *app.FlagError.
func (o Options) Validate() error {
	_, err := o.Enabled()
	return app.FirstError(
		err,
		app.AtLeast(FlagConcurrentSyncs, o.ConcurrentSyncs, 1),
		app.NotNegative(FlagBatchPeriod, o.BatchPeriod),
		app.AtLeast(FlagConcurrentSliceSyncs, o.ConcurrentSliceSyncs, 1),
		app.AtLeast(FlagMaxEndpointsPerSlice, o.MaxEndpointsPerSlice, 1),
		atMost(FlagMaxEndpointsPerSlice, o.MaxEndpointsPerSlice, maxMaxEndpointsPerSlice),
		app.NotNegative(FlagSliceBatchPeriod, o.SliceBatchPeriod),
		app.AtLeast(FlagMirroringConcurrentSyncs, o.MirroringConcurrentSyncs, 1),
		atMost(FlagMirroringConcurrentSyncs, o.MirroringConcurrentSyncs, maxMirroringConcurrentSyncs),
		app.AtLeast(FlagMirroringMaxEndpointsPerSubset, o.MirroringMaxEndpointsPerSubset, 1),
		atMost(FlagMirroringMaxEndpointsPerSubset, o.MirroringMaxEndpointsPerSubset, maxMirroringMaxEndpointsPerSubset),
		app.NotNegative(FlagMirroringBatchPeriod, o.MirroringBatchPeriod),
	)
}

func atMost(flag string, v, highest int) error {
	if v > highest {
		return &app.FlagError{Flag: flag, Err: fmt.Errorf("%d is more than %d", v, highest)}
	}
	return nil
}

// Enabled returns the controllers --controllers turns on, in kube-controller-manager's syntax
// (app.EnabledControllers).
func (o Options) Enabled() (map[string]bool, error) {
	return app.EnabledControllers(FlagControllers, o.Controllers, knownControllers)
}

// Flags returns the controllers' flags, each bound to its field of o; their defaults are o's
// values. New flag values on every call: app.Run adds environment variables to them in place.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		app.Bound(app.CategoryController, FlagControllers, &o.Controllers, app.ControllersUsage(knownControllers)),
		app.Bound(app.CategoryController, FlagConcurrentSyncs, &o.ConcurrentSyncs,
			"number of Services whose Endpoints are synced concurrently; more is faster but costs CPU and API calls"),
		app.Bound(app.CategoryController, FlagBatchPeriod, &o.BatchPeriod,
			"delay before syncing a Service after a Pod change, so that several Pod changes make one Endpoints update; 0 syncs at once"),
		app.Bound(app.CategoryController, FlagConcurrentSliceSyncs, &o.ConcurrentSliceSyncs,
			"number of Services whose EndpointSlices are synced concurrently; more is faster but costs CPU and API calls"),
		app.Bound(app.CategoryController, FlagMaxEndpointsPerSlice, &o.MaxEndpointsPerSlice,
			"maximum number of endpoints in one EndpointSlice (1-1000); more means fewer slices but larger ones to rewrite on each change"),
		app.Bound(app.CategoryController, FlagSliceBatchPeriod, &o.SliceBatchPeriod,
			"delay before syncing a Service's EndpointSlices after a Pod change, so that several Pod changes make one update; 0 syncs at once"),
		app.Bound(app.CategoryController, FlagMirroringConcurrentSyncs, &o.MirroringConcurrentSyncs,
			"number of custom Endpoints mirrored to EndpointSlices concurrently (1-50)"),
		app.Bound(app.CategoryController, FlagMirroringMaxEndpointsPerSubset, &o.MirroringMaxEndpointsPerSubset,
			"maximum number of addresses of one Endpoints subset mirrored to an EndpointSlice (1-1000); the rest are skipped with a TooManyAddressesToMirror event"),
		app.Bound(app.CategoryController, FlagMirroringBatchPeriod, &o.MirroringBatchPeriod,
			"delay before mirroring an Endpoints again after a change to one of its mirrored EndpointSlices, so that several changes make one update; 0 syncs at once"),
	}
}
