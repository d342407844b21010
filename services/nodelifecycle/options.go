package nodelifecycle

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/services/nodelifecycle/ipam"
	"github.com/kcm-split/kcm-split/services/nodelifecycle/tainteviction"
	"github.com/kcm-split/kcm-split/shared/app"
)

// Names this binary and its node lifecycle controller are known by, one constant each: the
// single source of truth for the binary, the Lease, the queues' metrics labels and what other
// components see. The other two controllers' names are in their packages (tainteviction.Name,
// ipam.Name, ipam.ComponentName).
const (
	// ControllerID is kcm-split's id of this binary: its name and the default Lease name.
	ControllerID = "nodelifecycle-controller"
	// Name is upstream's name of the node lifecycle controller (--controllers, leader
	// migration, the controller label of its reconcile metrics).
	Name = "node-lifecycle-controller"
	// NodeQueueName is upstream's name of the queue of Nodes whose NoSchedule taints are
	// reconciled, so workqueue_*{name="node_lifecycle_controller"} queries keep working.
	NodeQueueName = "node_lifecycle_controller"
	// PodQueueName is upstream's name of the queue of Pods newly bound to a Node.
	PodQueueName = "node_lifecycle_controller_pods"
	// ComponentName is upstream's source component of the node lifecycle controller's Events.
	ComponentName = "node-controller"
	// DefaultPort serves metrics and health unless --metrics-bind-address says otherwise.
	DefaultPort = 10282
)

// Flag names, upstream's (--enable-taint-eviction is ours, deprecated: --controllers chooses).
const (
	FlagControllers            = "controllers"
	FlagMonitorPeriod          = "node-monitor-period"
	FlagMonitorGracePeriod     = "node-monitor-grace-period"
	FlagStartupGracePeriod     = "node-startup-grace-period"
	FlagEvictionRate           = "node-eviction-rate"
	FlagSecondaryEvictionRate  = "secondary-node-eviction-rate"
	FlagLargeClusterThreshold  = "large-cluster-size-threshold"
	FlagUnhealthyZoneThreshold = "unhealthy-zone-threshold"
	FlagEnableTaintEviction    = "enable-taint-eviction"

	// kcm-split's, beyond upstream; their defaults are upstream's behaviour.
	FlagPartitionUnknownFraction       = "partition-unknown-fraction"
	FlagZoneFullDisruptionEvictionRate = "zone-full-disruption-eviction-rate"
	FlagKeepEvictionPace               = "keep-eviction-pace"
	FlagKeepSignsOfLife                = "keep-signs-of-life"
)

// RateUnset is the value of --zone-full-disruption-eviction-rate that means "not set": a
// fully disrupted zone is tainted at --node-eviction-rate, as upstream. A negative number
// rather than 0, because 0 is a meaningful rate: stop tainting such zones.
const RateUnset = -1

// Default client budget of this binary: the defaults of --kube-api-qps and --kube-api-burst.
const (
	// DefaultQPS is what upstream gives the three controllers this binary replaces together:
	// node-lifecycle-controller, taint-eviction-controller and node-ipam-controller each get
	// a client of 20 QPS / 30 burst there. Sharing one budget of 20 would let 255 Nodes
	// registering at once wait twice as long for their Pod ranges as upstream, behind the
	// taint writes of the same Nodes. At rest the controller spends almost nothing.
	DefaultQPS = 60
	// DefaultBurst is the three controllers' bursts together.
	DefaultBurst = 90
)

// knownControllers are the controllers --controllers can name, with upstream's aliases. None is
// off by default upstream: node-ipam-controller is on under "*" there too, and allocates only
// with --allocate-node-cidrs.
var knownControllers = []app.ControllerName{
	{Name: Name, Aliases: []string{"nodelifecycle"}},
	{Name: tainteviction.Name},
	{Name: ipam.Name, Aliases: []string{"nodeipam"}},
}

// Options are the controller's own settings.
type Options struct {
	// Controllers is --controllers as given: upstream's syntax, a comma-separated list of
	// names to enable, "-name" to disable, "*" for all three. See Enabled for how
	// TaintEviction and IPAM.Allocate narrow it.
	Controllers string
	// MonitorPeriod is how often every Node is checked even when no deadline or event asks
	// for it. Node health deadlines are also watched directly, so this bounds neither the
	// detection delay nor the zone-state refresh after a change.
	MonitorPeriod time.Duration
	// MonitorGracePeriod is how long a Node that has reported before may stay silent (no
	// Ready heartbeat, no Lease renewal) before it is marked Unknown.
	MonitorGracePeriod time.Duration
	// StartupGracePeriod replaces MonitorGracePeriod for a Node that has never reported.
	StartupGracePeriod time.Duration
	// EvictionRate is the NoExecute tainting rate per zone, Nodes per second, in a healthy
	// zone and, unless ZoneFullDisruptionEvictionRate says otherwise, in a fully disrupted
	// one (while some other zone is not).
	EvictionRate float64
	// SecondaryEvictionRate applies to a partially disrupted zone larger than
	// LargeClusterThreshold; smaller ones stop tainting.
	SecondaryEvictionRate float64
	// LargeClusterThreshold is the zone size above which a partially disrupted zone keeps
	// tainting at the secondary rate.
	LargeClusterThreshold int
	// UnhealthyZoneThreshold is the fraction of not-Ready Nodes (more than 2) at which a
	// zone counts as partially disrupted.
	UnhealthyZoneThreshold float64
	// ZoneFullDisruptionEvictionRate is the tainting rate of a zone with no Ready Node
	// while some other zone has one; RateUnset (the default) means EvictionRate, as
	// upstream, which treats such a zone as gone and its Pods as better off elsewhere
	// (k/k#131314: a zone cut off from the control plane then loses its Pods at the healthy
	// rate).
	ZoneFullDisruptionEvictionRate float64
	// PartitionUnknownFraction, when above 0, makes the controller read more than this
	// fraction of all Nodes falling silent together as its own partition from the Nodes
	// rather than that many dead Nodes (see partition.go). 0 is upstream's behaviour.
	PartitionUnknownFraction float64
	// KeepEvictionPace makes the Lease holder keep each zone's last NoExecute taint in the
	// cluster (handover.go), so that a new leader's first taint in a zone waits for the
	// zone's rate after it instead of coming at once (upstream's new leader starts every
	// zone with a token). false is upstream's behaviour.
	KeepEvictionPace bool
	// KeepSignsOfLife makes the Lease holder keep the last sign of life of each Node silent
	// for a while in the cluster (handover.go), so that a new leader counts such a Node's
	// grace period from it instead of from its own start: it marks a Node that died before
	// the handover Unknown (and taints it) as the previous leader would have, sooner than
	// upstream's new leader. false is upstream's behaviour.
	KeepSignsOfLife bool
	// TaintEviction is --enable-taint-eviction, deprecated: false keeps the taint-eviction
	// controller (the deletion of Pods that do not tolerate a NoExecute taint) off, whatever
	// Controllers says, as --controllers=*,-taint-eviction-controller does.
	TaintEviction bool
	// IPAM is node Pod range allocation (upstream's node-ipam-controller). As upstream, it
	// allocates only with IPAM.Allocate (--allocate-node-cidrs, false by default), and only
	// if Controllers enables it.
	IPAM ipam.Options
}

// DefaultOptions returns upstream's defaults.
func DefaultOptions() Options {
	return Options{
		Controllers:            "*",
		MonitorPeriod:          5 * time.Second,
		MonitorGracePeriod:     50 * time.Second,
		StartupGracePeriod:     time.Minute,
		EvictionRate:           0.1,
		SecondaryEvictionRate:  0.01,
		LargeClusterThreshold:  50,
		UnhealthyZoneThreshold: 0.55,
		TaintEviction:          true,

		ZoneFullDisruptionEvictionRate: RateUnset,
		IPAM:                           ipam.Options{FreeRangesWarning: ipam.DefaultFreeRangesWarning},
	}
}

// Validate reports the first bad value as an *app.FlagError.
func (o Options) Validate() error {
	bad := func(flag, format string, args ...any) error {
		return &app.FlagError{Flag: flag, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case o.MonitorPeriod <= 0:
		return bad(FlagMonitorPeriod, "%s must be positive", o.MonitorPeriod)
	// A grace period shorter than the period that checks it would mark Nodes Unknown
	// between two of their heartbeats; upstream documents the constraint, we enforce it.
	case o.MonitorGracePeriod < o.MonitorPeriod:
		return bad(FlagMonitorGracePeriod, "%s is shorter than --%s (%s)", o.MonitorGracePeriod, FlagMonitorPeriod, o.MonitorPeriod)
	case o.StartupGracePeriod < o.MonitorPeriod:
		return bad(FlagStartupGracePeriod, "%s is shorter than --%s (%s)", o.StartupGracePeriod, FlagMonitorPeriod, o.MonitorPeriod)
	case !(o.EvictionRate >= 0): // NaN too
		return bad(FlagEvictionRate, "%g is not a rate of 0 or more", o.EvictionRate)
	case !(o.SecondaryEvictionRate >= 0):
		return bad(FlagSecondaryEvictionRate, "%g is not a rate of 0 or more", o.SecondaryEvictionRate)
	case o.LargeClusterThreshold < 0:
		return bad(FlagLargeClusterThreshold, "%d is negative", o.LargeClusterThreshold)
	case !(o.UnhealthyZoneThreshold >= 0 && o.UnhealthyZoneThreshold <= 1):
		return bad(FlagUnhealthyZoneThreshold, "%g is outside 0..1", o.UnhealthyZoneThreshold)
	case !(o.ZoneFullDisruptionEvictionRate >= 0 || o.ZoneFullDisruptionEvictionRate == RateUnset):
		return bad(FlagZoneFullDisruptionEvictionRate, "%g is neither a rate of 0 or more nor %d (unset: --%s, as upstream)", o.ZoneFullDisruptionEvictionRate, RateUnset, FlagEvictionRate)
	// 1 would never trigger (more than all Nodes cannot fall silent): refused rather than
	// silently meaning "off".
	case !(o.PartitionUnknownFraction >= 0 && o.PartitionUnknownFraction < 1):
		return bad(FlagPartitionUnknownFraction, "%g is outside 0 (off) up to, not including, 1", o.PartitionUnknownFraction)
	}
	// The IPAM flags are checked whichever controllers run, as before --controllers existed.
	_, ipamErr := o.IPAM.Config()
	_, err := o.Enabled()
	return app.FirstError(err, ipamErr)
}

// Enabled returns the controllers this binary runs: those --controllers turns on (upstream's
// syntax, app.EnabledControllers), less taint-eviction-controller without
// --enable-taint-eviction and less node-ipam-controller without --allocate-node-cidrs. Each
// boolean can only turn its controller off, so --controllers=* with both at their defaults
// runs what the binary ran before it had --controllers. A combination that runs nothing is
// refused, naming --controllers.
func (o Options) Enabled() (map[string]bool, error) {
	enabled, err := app.EnabledControllers(FlagControllers, o.Controllers, knownControllers)
	if err != nil {
		return nil, err
	}
	if !o.TaintEviction {
		delete(enabled, tainteviction.Name)
	}
	if !o.IPAM.Allocate {
		delete(enabled, ipam.Name)
	}
	if len(enabled) == 0 {
		return nil, &app.FlagError{Flag: FlagControllers, Err: fmt.Errorf(
			"%q runs nothing with --%s=%t and --%s=%t", o.Controllers, FlagEnableTaintEviction, o.TaintEviction, ipam.FlagAllocateNodeCIDRs, o.IPAM.Allocate)}
	}
	return enabled, nil
}

// Flags returns the controller's flags, each bound to its field of o; their defaults are o's
// values. New flag values on every call: app.Run adds environment variables to them in place.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		app.Bound(app.CategoryController, FlagControllers, &o.Controllers, app.ControllersUsage(knownControllers)+
			"; taint-eviction-controller also needs --"+FlagEnableTaintEviction+", node-ipam-controller --"+ipam.FlagAllocateNodeCIDRs),
		app.Bound(app.CategoryController, FlagMonitorPeriod, &o.MonitorPeriod,
			"how often every Node's health is checked; deadlines are also tracked per Node, so detection does not wait for this period"),
		app.Bound(app.CategoryController, FlagMonitorGracePeriod, &o.MonitorGracePeriod,
			"how long a Node may post no Ready heartbeat and renew no Lease before it is marked Unknown; at least --"+FlagMonitorPeriod),
		app.Bound(app.CategoryController, FlagStartupGracePeriod, &o.StartupGracePeriod,
			"grace period for a Node that has never reported, instead of --"+FlagMonitorGracePeriod+"; at least --"+FlagMonitorPeriod),
		app.Bound(app.CategoryController, FlagEvictionRate, &o.EvictionRate,
			"Nodes per second given a NoExecute taint in a zone that is healthy (or fully down while another zone is healthy)"),
		app.Bound(app.CategoryController, FlagSecondaryEvictionRate, &o.SecondaryEvictionRate,
			"Nodes per second given a NoExecute taint in a partially disrupted zone larger than --"+FlagLargeClusterThreshold),
		app.Bound(app.CategoryController, FlagLargeClusterThreshold, &o.LargeClusterThreshold,
			"zone size above which a partially disrupted zone keeps tainting at --"+FlagSecondaryEvictionRate+"; smaller ones stop"),
		app.Bound(app.CategoryController, FlagUnhealthyZoneThreshold, &o.UnhealthyZoneThreshold,
			"fraction (0..1) of not-Ready Nodes, more than 2, at which a zone is partially disrupted"),
		app.Bound(app.CategoryController, FlagZoneFullDisruptionEvictionRate, &o.ZoneFullDisruptionEvictionRate,
			fmt.Sprintf("Nodes per second given a NoExecute taint in a zone with no Ready Node while another zone has one; %d (the default) means --%s, as upstream", RateUnset, FlagEvictionRate)),
		app.Bound(app.CategoryController, FlagPartitionUnknownFraction, &o.PartitionUnknownFraction,
			"when more than this fraction (0..1) of all Nodes fall silent together, take it for this controller's own partition from them: mark no Pod not Ready and add no taint until each Node's Lease returns (or a grace period after the first returns); 0 (the default) is upstream's behaviour"),
		app.Bound(app.CategoryController, FlagKeepEvictionPace, &o.KeepEvictionPace,
			"keep each zone's last NoExecute taint in the ConfigMap <Lease name>"+StateStoreSuffix+" beside the Lease, so that a new leader taints no sooner than the zone's rate allows after the previous leader's last taint (if it cannot read it, no sooner than one interval after it starts); false (the default) is upstream's behaviour: a new leader may taint one Node per zone at once"),
		app.Bound(app.CategoryController, FlagKeepSignsOfLife, &o.KeepSignsOfLife,
			"keep the last sign of life of each Node silent for a quarter of --"+FlagMonitorGracePeriod+" or more in the ConfigMap <Lease name>"+StateStoreSuffix+" beside the Lease, so that a new leader counts its grace period from it (believed only if fresh, not in the new leader's future, and while the Node's Lease and heartbeat are still those the previous leader saw); false (the default) is upstream's behaviour: a new leader gives every Node a full grace period from its start"),
		app.Bound(app.CategoryController, FlagEnableTaintEviction, &o.TaintEviction,
			"deprecated, use --"+FlagControllers+"=*,-"+tainteviction.Name+" instead of false: false keeps "+tainteviction.Name+" (the deletion of Pods that do not tolerate a NoExecute taint of their Node) off whatever --"+FlagControllers+" says"),
		app.Bound("Controller: node IPAM", ipam.FlagAllocateNodeCIDRs, &o.IPAM.Allocate,
			"give every Node without one a Pod range (spec.podCIDRs) from --"+ipam.FlagClusterCIDR+", as upstream: "+ipam.Name+" runs only with it, and only if --"+FlagControllers+" enables it"),
		app.Bound("Controller: node IPAM", ipam.FlagClusterCIDR, &o.IPAM.ClusterCIDR,
			"CIDR the Nodes' Pod ranges are cut from: one, or an IPv4,IPv6 pair for dual-stack Nodes"),
		app.Bound("Controller: node IPAM", ipam.FlagNodeCIDRMaskSize, &o.IPAM.MaskSize,
			"prefix length of each Node's range in a single-stack cluster; 0 means 24 for IPv4, 64 for IPv6"),
		app.Bound("Controller: node IPAM", ipam.FlagNodeCIDRMaskSizeIPv4, &o.IPAM.MaskSizeIPv4,
			"prefix length of each Node's IPv4 range; 0 means 24"),
		app.Bound("Controller: node IPAM", ipam.FlagNodeCIDRMaskSizeIPv6, &o.IPAM.MaskSizeIPv6,
			"prefix length of each Node's IPv6 range; 0 means 64"),
		app.Bound("Controller: node IPAM", ipam.FlagServiceClusterIPRange, &o.IPAM.ServiceCIDR,
			"the Service CIDR (or an IPv4,IPv6 pair): no Node gets a range overlapping it"),
		app.Bound("Controller: node IPAM", ipam.FlagCIDRFreeRangesWarning, &o.IPAM.FreeRangesWarning,
			"one Warning Event (on the kube-node-lease Namespace) when fewer than this many ranges of a cluster CIDR are free; 0 turns it off"),
	}
}
