package namespace

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/app"
)

// Names this binary and its controller are known by, one constant each: the single source of
// truth for the binary, the Lease, the queue's metrics label and what other components see.
// ControllerID and Name share a value, not a meaning: kcm-split's binary, upstream's controller.
const (
	// ControllerID is kcm-split's id of this binary: its name and the default Lease name.
	ControllerID = "namespace-controller"
	// Name is upstream's name of the controller (kube-controller-manager's --controllers,
	// leader migration, the controller label of the reconcile metrics), also its Events'
	// source: upstream's writes none, so no other exists.
	Name = "namespace-controller"
	// QueueName is upstream's workqueue name, so workqueue_*{name="namespace"} queries written
	// for kube-controller-manager keep working.
	QueueName = "namespace"
	// DefaultPort serves metrics and health unless --metrics-bind-address says otherwise.
	DefaultPort = 10284
	// MetricsSubsystem prefixes this controller's own metrics: kcm_split_namespace_*.
	MetricsSubsystem = "namespace"
)

// Flag names, upstream's.
const (
	FlagConcurrentSyncs = "concurrent-namespace-syncs"
	FlagSyncPeriod      = "namespace-sync-period"
	// FlagAllowDeletionWithUnavailableGroups is kcm-split's (see Options).
	FlagAllowDeletionWithUnavailableGroups = "allow-deletion-with-unavailable-groups"
)

// Tuning that is not a flag: upstream has no knob for any of these.
const (
	// DeletionGracePeriod is how long after first seeing a namespace deleted the controller
	// waits before removing content, as upstream does: apiservers in an HA control plane
	// need a moment to observe the deletion (and to refuse new objects in the namespace),
	// and etcd members to observe last-moment creations, so the cleanup sees everything.
	DeletionGracePeriod = 5 * time.Second
	// DefaultPageSize bounds every list and every deletecollection call. Upstream deletes a
	// whole collection in one request, which times out on tens of thousands of objects and
	// then fails the same way on every retry.
	DefaultPageSize = 500
	// DefaultQPS and DefaultBurst are this binary's --kube-api-qps and --kube-api-burst
	// defaults: the budget kube-controller-manager gives its namespace controller (its
	// shared 20 and 30 raised x20 and x100), since deleting a namespace takes many small
	// calls. Unlike there, the flags set the budget itself, not a base to multiply.
	DefaultQPS   = 400
	DefaultBurst = 3000
)

// Options are the controller's own settings.
type Options struct {
	// ConcurrentSyncs is the number of namespaces deleted in parallel.
	ConcurrentSyncs int
	// SyncPeriod is how often every terminating namespace is looked at again even without
	// an event (upstream's resync of the namespace informer).
	SyncPeriod time.Duration
	// GracePeriod is DeletionGracePeriod outside unit tests.
	GracePeriod time.Duration
	// PageSize bounds lists and deletecollection calls.
	PageSize int64
	// AllowDeletionWithUnavailableGroups, when positive, lets a namespace be finalized
	// although some API group versions fail discovery, provided each of them has failed for
	// at least this long and its last successful discovery (by this process, or by the
	// Lease holder before it, kept in a ConfigMap beside the Lease: store.go) served no
	// namespaced resource that can be listed or deleted: nothing of it can be left in the
	// namespace. A group never discovered successfully, or one that served such resources,
	// still blocks. 0, the default, is upstream's behaviour: any discovery failure blocks.
	AllowDeletionWithUnavailableGroups time.Duration
}

// DefaultOptions returns upstream's defaults.
func DefaultOptions() Options {
	return Options{
		ConcurrentSyncs: 10,
		SyncPeriod:      5 * time.Minute,
		GracePeriod:     DeletionGracePeriod,
		PageSize:        DefaultPageSize,
	}
}

// Validate reports the first bad value as an *app.FlagError.
func (o Options) Validate() error {
	return app.FirstError(
		app.AtLeast(FlagConcurrentSyncs, o.ConcurrentSyncs, 1),
		app.Positive(FlagSyncPeriod, o.SyncPeriod),
		app.NotNegative(FlagAllowDeletionWithUnavailableGroups, o.AllowDeletionWithUnavailableGroups),
	)
}

// Flags returns the controller's flags, each bound to its field of o; their defaults are o's
// values. New flag values on every call: app.Run adds environment variables to them in place.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		app.Bound(app.CategoryController, FlagConcurrentSyncs, &o.ConcurrentSyncs,
			"number of namespaces deleted concurrently; more is faster but costs CPU and API calls"),
		app.Bound(app.CategoryController, FlagSyncPeriod, &o.SyncPeriod,
			"how often every terminating namespace is checked again without an event"),
		app.Bound(app.CategoryController, FlagAllowDeletionWithUnavailableGroups, &o.AllowDeletionWithUnavailableGroups,
			"finalize a namespace blocked only by API groups unavailable for longer than this whose last successful discovery served nothing that can hold objects in a namespace; 0 (upstream): any unavailable group blocks"),
	}
}
