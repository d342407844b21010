package pvbinder

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/app"
)

// Names this binary and its controller are known by, one constant each: the single source of
// truth for the binary, the Lease, the queues' metrics labels and the source of its Events.
const (
	// ControllerID is kcm-split's id of this binary: its name and the default Lease name.
	ControllerID = "pv-binder-controller"
	// Name is upstream's name of the controller (kube-controller-manager's --controllers,
	// leader migration, the controller label of the reconcile metrics).
	Name = "persistentvolume-binder-controller"
	// ComponentName is upstream's source component of the controller's Events.
	ComponentName = "persistentvolume-controller"
	// VolumeQueueName and ClaimQueueName are upstream's workqueue names.
	VolumeQueueName = "volumes"
	ClaimQueueName  = "claims"
	// DefaultPort serves metrics and health unless --metrics-bind-address says otherwise.
	DefaultPort = 10286
)

// Flag names. The sync period is upstream's; the worker count is this binary's own (upstream
// runs exactly one worker per queue).
const (
	FlagSyncPeriod          = "pvclaimbinder-sync-period"
	FlagWorkers             = "concurrent-pv-binder-syncs"
	FlagDynamicProvisioning = "enable-dynamic-provisioning"
	FlagHostPathProvisioner = "enable-hostpath-provisioner"

	FlagRecyclerTemplateNFS        = "pv-recycler-pod-template-filepath-nfs"
	FlagRecyclerMinTimeoutNFS      = "pv-recycler-minimum-timeout-nfs"
	FlagRecyclerIncrementNFS       = "pv-recycler-increment-timeout-nfs"
	FlagRecyclerTemplateHostPath   = "pv-recycler-pod-template-filepath-hostpath"
	FlagRecyclerMinTimeoutHostPath = "pv-recycler-minimum-timeout-hostpath"
	FlagRecyclerIncrementHostPath  = "pv-recycler-timeout-increment-hostpath"

	// kcm-split's own (issue 34): an Event on claims bound to much larger volumes, and the
	// opt-in rebind of a Released volume to a claim recreated under the same name.
	FlagOversizedBindEventRatio = "oversized-bind-event-ratio"
	FlagRebindOnRecreate        = "enable-rebind-on-recreate"
)

// Default client budget of this binary: the defaults of --kube-api-qps and --kube-api-burst.
const (
	// DefaultQPS is the client rate this binary uses unless told otherwise. A static bind
	// costs five writes (PV phase Available, PV claimRef, PV phase Bound, claim volumeName,
	// claim phase Bound), so at the shared default of 20 QPS a binder completes 4 binds/s:
	// a StatefulSet of 100 replicas waits 25 s for its last volume. 200 QPS is 40 binds/s,
	// enough to keep up with 1,000 claims created at 100/s with a p99 well under 20 s,
	// while staying far below what one kube-apiserver serves (its default
	// --max-mutating-requests-inflight is 200 concurrent writes, each a few ms). The binder
	// only writes when there is binding to do, so the budget is spent in bursts, never
	// continuously: at rest it makes no requests at all.
	DefaultQPS = 200
	// DefaultBurst lets a burst of claims start binding at once.
	DefaultBurst = 400
)

// Options are the controller's own settings.
type Options struct {
	// SyncPeriod is how often every PV and claim is re-examined even without an event:
	// the safety net for missed events and objects whose sync was dropped. A resync of an
	// object that is in its desired state makes no API call.
	SyncPeriod time.Duration
	// Workers is the number of goroutines per queue (volumes and claims). Binds of
	// different claims run in parallel; a PV is never written by two of them at once.
	Workers int
	// DynamicProvisioning off: a claim no PV fits is never handed to a provisioner (no
	// annotation, no event), it waits for a PV an admin creates.
	DynamicProvisioning bool
	// HostPathProvisioner turns on the kubernetes.io/host-path provisioner, for development
	// and testing on one node only: it makes directories on this process's own filesystem.
	HostPathProvisioner bool

	// Recycler Pods (the Recycle reclaim policy), per recyclable source: the Pod template
	// file ("" for upstream's default Pod), and its ActiveDeadlineSeconds, the larger of
	// the minimum and the increment per whole Gi of the volume.
	RecyclerTemplateNFS, RecyclerTemplateHostPath     string
	RecyclerMinTimeoutNFS, RecyclerMinTimeoutHostPath int
	RecyclerIncrementNFS, RecyclerIncrementHostPath   int

	// OversizedBindEventRatio: a claim bound to a volume at least this many times the
	// storage it requests gets an OversizedVolumeBound Event, once, when it becomes Bound.
	// 0 turns it off. An Event only adds information, hence on by default.
	OversizedBindEventRatio float64
	// RebindOnRecreate lets a Released volume with the Retain policy and
	// AnnRebindOnRecreate: "true" be bound again to a new claim of the namespace and name
	// its claimRef names, once its old claim is verified gone. Off, as upstream: such a
	// volume waits for an admin.
	RebindOnRecreate bool
}

// DefaultOptions returns the defaults: upstream's sync period and provisioning settings, and
// eight workers per queue.
func DefaultOptions() Options {
	return Options{
		SyncPeriod: 15 * time.Second, Workers: 8, DynamicProvisioning: true,
		RecyclerMinTimeoutNFS: 300, RecyclerIncrementNFS: 30,
		RecyclerMinTimeoutHostPath: 60, RecyclerIncrementHostPath: 30,
		OversizedBindEventRatio: 2,
	}
}

// Validate reports the first bad value as an *app.FlagError.
func (o Options) Validate() error {
	return app.FirstError(
		app.Positive(FlagSyncPeriod, o.SyncPeriod),
		app.AtLeast(FlagWorkers, o.Workers, 1),
		app.AtLeast(FlagRecyclerMinTimeoutNFS, o.RecyclerMinTimeoutNFS, 0),
		app.AtLeast(FlagRecyclerIncrementNFS, o.RecyclerIncrementNFS, 0),
		app.AtLeast(FlagRecyclerMinTimeoutHostPath, o.RecyclerMinTimeoutHostPath, 0),
		app.AtLeast(FlagRecyclerIncrementHostPath, o.RecyclerIncrementHostPath, 0),
		ratioError(o.OversizedBindEventRatio),
		templateError(FlagRecyclerTemplateNFS, o.RecyclerTemplateNFS),
		templateError(FlagRecyclerTemplateHostPath, o.RecyclerTemplateHostPath),
	)
}

// ratioError refuses an oversize ratio that is neither off (0) nor above 1: at 1 or below,
// every bind would be reported.
func ratioError(r float64) error {
	if r == 0 || r > 1 {
		return nil
	}
	return &app.FlagError{Flag: FlagOversizedBindEventRatio, Err: fmt.Errorf("%v is neither 0 (off) nor more than 1", r)}
}

// templateError reports a recycler Pod template file that cannot be used.
func templateError(flag, path string) error {
	if path == "" {
		return nil
	}
	if _, err := loadRecyclerTemplate(path); err != nil {
		return &app.FlagError{Flag: flag, Err: err}
	}
	return nil
}

// Flags returns the controller's flags, each bound to its field of o; their defaults are o's
// values. New flag values on every call: app.Run adds environment variables to them in place.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		app.Bound(app.CategoryController, FlagSyncPeriod, &o.SyncPeriod,
			"how often every PersistentVolume and PersistentVolumeClaim is re-examined without an event"),
		app.Bound(app.CategoryController, FlagWorkers, &o.Workers,
			"number of workers per queue (volumes, claims); claims bind in parallel, never two to one volume"),
		app.Bound(app.CategoryController, FlagDynamicProvisioning, &o.DynamicProvisioning,
			"hand claims no volume fits to their StorageClass's provisioner"),
		app.Bound(app.CategoryController, FlagHostPathProvisioner, &o.HostPathProvisioner,
			"provision kubernetes.io/host-path volumes as directories under /tmp/hostpath_pv of this process's filesystem; "+
				"for development and testing only, does not work in a multi-node cluster"),
		app.Bound(app.CategoryController, FlagRecyclerTemplateNFS, &o.RecyclerTemplateNFS,
			"the file path to a pod definition used as a template for NFS persistent volume recycling"),
		app.Bound(app.CategoryController, FlagRecyclerMinTimeoutNFS, &o.RecyclerMinTimeoutNFS,
			"the minimum ActiveDeadlineSeconds to use for an NFS Recycler pod"),
		app.Bound(app.CategoryController, FlagRecyclerIncrementNFS, &o.RecyclerIncrementNFS,
			"the increment of time added per Gi to ActiveDeadlineSeconds for an NFS scrubber pod"),
		app.Bound(app.CategoryController, FlagRecyclerTemplateHostPath, &o.RecyclerTemplateHostPath,
			"the file path to a pod definition used as a template for HostPath persistent volume recycling; "+
				"for development and testing only, does not work in a multi-node cluster"),
		app.Bound(app.CategoryController, FlagRecyclerMinTimeoutHostPath, &o.RecyclerMinTimeoutHostPath,
			"the minimum ActiveDeadlineSeconds to use for a HostPath Recycler pod; for development and testing only"),
		app.Bound(app.CategoryController, FlagRecyclerIncrementHostPath, &o.RecyclerIncrementHostPath,
			"the increment of time added per Gi to ActiveDeadlineSeconds for a HostPath scrubber pod; for development and testing only"),
		app.Bound(app.CategoryController, FlagOversizedBindEventRatio, &o.OversizedBindEventRatio,
			"a claim bound to a volume at least this many times the storage it requests gets an OversizedVolumeBound Event; 0 turns it off"),
		app.Bound(app.CategoryController, FlagRebindOnRecreate, &o.RebindOnRecreate,
			"bind a Released volume with the Retain policy and the annotation "+AnnRebindOnRecreate+`: "true" `+
				"to a new claim of the namespace and name it was bound to, once the old claim is verified gone"),
	}
}
