package endpoints

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/sharding"
)

// Names of this controller, upstream's, one constant each.
const (
	// Name is upstream's name of the controller (--controllers, leader migration; upstream's
	// alias is "endpoint"), and its controller label in the reconcile metrics.
	Name = "endpoints-controller"
	// QueueName is the workqueue name, upstream's, so workqueue_*{name="endpoint"} queries
	// written for kube-controller-manager keep working.
	QueueName = "endpoint"
	// ComponentName is upstream's source component of the controller's Events, and the value
	// of LabelManagedBy on the Endpoints it owns.
	ComponentName = "endpoint-controller"
)

// Flag names, upstream's.
const (
	FlagConcurrentSyncs = "concurrent-endpoint-syncs"
	FlagBatchPeriod     = "endpoint-updates-batch-period"
)

// Options are the Endpoints controller's settings.
type Options struct {
	// ConcurrentSyncs is the number of Services whose Endpoints are reconciled in parallel.
	ConcurrentSyncs int
	// BatchPeriod delays the sync a Pod change triggers, so that a burst of Pod changes
	// (a rollout, a node going away) becomes one Endpoints write per Service instead of
	// one per Pod. Service changes are never delayed. Zero syncs at once.
	BatchPeriod time.Duration
	// Shard is the binary's shard (set by its Spec, no flag of its own): the controller acts
	// only on keys of its namespaces, and a Service or Endpoints missing from a sharded
	// cache is taken as deleted only once a live read agrees. The zero value is unsharded.
	Shard sharding.Shard
}

// DefaultOptions returns upstream's defaults.
func DefaultOptions() Options {
	return Options{ConcurrentSyncs: 5, BatchPeriod: 0}
}

// Validate reports the first bad value as an *app.FlagError.
func (o Options) Validate() error {
	return app.FirstError(
		app.AtLeast(FlagConcurrentSyncs, o.ConcurrentSyncs, 1),
		app.NotNegative(FlagBatchPeriod, o.BatchPeriod),
	)
}

// Flags returns the controller's flags, each bound to its field of o; their defaults are o's
// values. New flag values on every call: app.Run adds environment variables to them in place.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		app.Bound(app.CategoryController, FlagConcurrentSyncs, &o.ConcurrentSyncs,
			"number of Services whose Endpoints are synced concurrently; more is faster but costs CPU and API calls"),
		app.Bound(app.CategoryController, FlagBatchPeriod, &o.BatchPeriod,
			"delay before syncing a Service after a Pod change, so that several Pod changes make one Endpoints update; 0 syncs at once"),
	}
}
