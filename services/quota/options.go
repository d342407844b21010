package quota

import (
	"time"

	"github.com/urfave/cli/v2"

	"k8s.io/component-base/featuregate"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/sharding"
)

// Names this binary and its controller are known by, one constant each: the single source of
// truth for the binary, the Lease, the queues' metrics labels and the Events it writes.
const (
	// ControllerID is kcm-split's id of this binary: its name and the default Lease name.
	ControllerID = "quota-controller"
	// Name is upstream's name of the controller (kube-controller-manager's --controllers,
	// leader migration, the controller label of the reconcile metrics), also its Events'
	// source: upstream's writes none, so no other exists.
	Name = "resourcequota-controller"
	// QueuePrimary is upstream's queue for full recalculations and replenishment.
	QueuePrimary = "resourcequota_primary"
	// QueuePriority is upstream's queue for quotas whose status is missing hard limits or
	// usage: until they are computed, admission refuses every create the quota covers.
	QueuePriority = "resourcequota_priority"
	// DefaultPort serves metrics and health unless --metrics-bind-address says otherwise.
	DefaultPort = 10283
)

// Flag names: the first two are upstream's, the others are kcm-split's own.
const (
	FlagConcurrentSyncs       = "concurrent-resource-quota-syncs"
	FlagSyncPeriod            = "resource-quota-sync-period"
	FlagDiscoveryPeriod       = "resource-quota-discovery-period"
	FlagInformerSyncTimeout   = "resource-quota-informer-sync-timeout"
	FlagUncountableAnnotation = "resource-quota-uncountable-annotation"
)

// Options are the controller's own settings.
type Options struct {
	// ConcurrentSyncs is the number of workers per queue.
	ConcurrentSyncs int
	// SyncPeriod is how often every quota is recalculated from scratch; 0 disables it.
	SyncPeriod time.Duration
	// DiscoveryPeriod is how often the API's resources are discovered again, so that
	// count/<resource> of a CRD created later is counted.
	DiscoveryPeriod time.Duration
	// InformerSyncTimeout is how long a resource type's informer may take to list before the
	// quotas tracking it get an Event saying it cannot be counted.
	InformerSyncTimeout time.Duration
	// UncountableAnnotation names, on the quota itself (AnnUncountable), the resources whose
	// usage keeps its last value because their type cannot be counted. Off: the annotation is
	// never written, and one an earlier run left is removed.
	UncountableAnnotation bool
	// PodResources is what a Pod is charged: set from the feature gates (PodLevelResources,
	// InPlacePodVerticalScaling), not a flag of its own.
	PodResources resourcehelper.PodResourcesOptions
	// Claims is how ResourceClaims are charged: set from the feature gates
	// (DynamicResourceAllocation, DRAExtendedResource).
	Claims ClaimOptions
	// View is the binary's shard (--shards > 1, set by its Spec, no flag of its own): every
	// namespaced informer holds only its namespaces and only their quotas are synced. Nil:
	// unsharded, upstream's behaviour.
	View *sharding.View
}

// PodResources returns what a Pod is charged under gates, as upstream's pod evaluator
// decides it: pod-level resources when PodLevelResources is on, and the larger of what
// containers ask and what the kubelet allocated when InPlacePodVerticalScaling is on.
func PodResources(gates featuregate.FeatureGate) resourcehelper.PodResourcesOptions {
	return resourcehelper.PodResourcesOptions{
		UseStatusResources:    gates.Enabled(features.InPlacePodVerticalScaling),
		SkipPodLevelResources: !gates.Enabled(features.PodLevelResources),
	}
}

// DefaultOptions returns upstream's defaults (and ours for our own flags).
func DefaultOptions() Options {
	return Options{
		ConcurrentSyncs:     5,
		SyncPeriod:          5 * time.Minute,
		DiscoveryPeriod:     30 * time.Second,
		InformerSyncTimeout: 30 * time.Second,
		// On: it only adds information, written only while some usage cannot be counted
		// (status.hard and status.used are written exactly as without it).
		UncountableAnnotation: true,
		PodResources:          PodResources(features.New()),
		Claims:                Claims(features.New()),
	}
}

// Validate reports the first bad value as an *app.FlagError.
func (o Options) Validate() error {
	return app.FirstError(
		app.AtLeast(FlagConcurrentSyncs, o.ConcurrentSyncs, 1),
		app.NotNegative(FlagSyncPeriod, o.SyncPeriod),
		app.AtLeast(FlagDiscoveryPeriod, o.DiscoveryPeriod, time.Second),
		app.Positive(FlagInformerSyncTimeout, o.InformerSyncTimeout),
	)
}

// Flags returns the controller's flags, each bound to its field of o; their defaults are o's
// values. New flag values on every call: app.Run adds environment variables to them in place.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		app.Bound(app.CategoryController, FlagConcurrentSyncs, &o.ConcurrentSyncs,
			"number of ResourceQuotas synced concurrently, per queue"),
		app.Bound(app.CategoryController, FlagSyncPeriod, &o.SyncPeriod,
			"period for recalculating the usage of every quota from scratch; 0 disables it"),
		app.Bound(app.CategoryController, FlagDiscoveryPeriod, &o.DiscoveryPeriod,
			"period for discovering the API's resources again, so that count/<resource> of a CRD created later is counted"),
		app.Bound(app.CategoryController, FlagInformerSyncTimeout, &o.InformerSyncTimeout,
			"how long a resource type may take to list before quotas tracking it get a warning Event; their other resources are published meanwhile"),
		app.Bound(app.CategoryController, FlagUncountableAnnotation, &o.UncountableAnnotation,
			"name on each quota (annotation "+AnnUncountable+") the resources whose usage cannot be counted and keeps its last value; removed once counted"),
	}
}
