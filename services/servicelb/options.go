package servicelb

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
	"github.com/kcm-split/kcm-split/shared/app"
)

// Names this controller is known by: the single source of truth for the binary, the Lease,
// the queues' metric labels and the Helm chart key.
const (
	// ControllerID names the binary, its default Lease and its claims; it is also upstream's
	// name of the controller (cloud-controller-manager's), so it labels the reconcile metrics.
	ControllerID = "service-lb-controller"
	// QueueName and NodeQueueName are upstream's workqueue names, so workqueue_*{name="service"}
	// queries written for kube-controller-manager keep working.
	QueueName     = "service"
	NodeQueueName = "node"
	// PoolQueueName is the queue of IPAddressPool status updates, which upstream does not have.
	PoolQueueName = "ipaddresspool"
	// ComponentName is upstream's service controller name, the source of our Events.
	ComponentName = "service-controller"
	// DefaultPort serves metrics and health unless --metrics-bind-address says otherwise.
	DefaultPort = 10285
)

// Flag names, upstream's.
const (
	FlagConcurrentSyncs   = "concurrent-service-syncs"
	FlagLoadBalancerClass = "load-balancer-class"
	// FlagPoolAPI is kcm-split's own: which pool APIs addresses come from.
	FlagPoolAPI = "pool-api"
	// FlagMetalLBNamespace is kcm-split's own: where MetalLB's pools are read from.
	FlagMetalLBNamespace = "metallb-namespace"
	// FlagPendingCondition is kcm-split's own: the LoadBalancerPending Service condition.
	FlagPendingCondition = "service-pending-condition"
)

// DefaultMetalLBNamespace is the namespace MetalLB's manifests and chart install into.
const DefaultMetalLBNamespace = "metallb-system"

// Default client budget of this binary: the defaults of --kube-api-qps and --kube-api-burst.
const (
	// DefaultQPS: a new LoadBalancer Service costs two writes (finalizer, then status) and
	// two Events, so at the shared default of 20 QPS the controller would serve only five
	// new Services a second, and a burst (a namespace of Services applied at once, a
	// restore of a cluster) would queue for minutes. 100 QPS serves 25 a second. At rest
	// the controller makes no requests at all: the budget is only spent on real changes.
	DefaultQPS = 100
	// DefaultBurst lets a burst of Services start at once.
	DefaultBurst = 200
)

// Options are the controller's own settings.
type Options struct {
	// ConcurrentSyncs is the number of Services reconciled in parallel.
	ConcurrentSyncs int
	// LoadBalancerClass is the spec.loadBalancerClass this controller serves; empty serves
	// Services without a class, as upstream's service controller does.
	LoadBalancerClass string
	// MinRetryDelay and MaxRetryDelay bound the per-Service backoff after a failed sync
	// (upstream: 5s to 300s).
	MinRetryDelay, MaxRetryDelay time.Duration
	// PoolStatusDelay batches pool status updates: many allocations in a burst make one
	// status write per pool.
	PoolStatusDelay time.Duration
	// PoolAPI is the comma list of pool APIs to read (the names of poolsource.APIs).
	PoolAPI string
	// MetalLBNamespace is the namespace of the MetalLB pools read: MetalLB's controller and
	// speaker read only their own namespace's.
	MetalLBNamespace string
	// PendingCondition sets the LoadBalancerPending condition on Services waiting for an
	// address. Off by default: upstream writes no Service condition, and others may read
	// status.conditions.
	PendingCondition bool
}

// DefaultOptions returns upstream's defaults.
func DefaultOptions() Options {
	return Options{
		ConcurrentSyncs:  1,
		MinRetryDelay:    5 * time.Second,
		MaxRetryDelay:    300 * time.Second,
		PoolStatusDelay:  time.Second,
		PoolAPI:          poolsource.KCMSplit.Name,
		MetalLBNamespace: DefaultMetalLBNamespace,
	}
}

// Validate reports the first bad value as an *app.FlagError.
func (o Options) Validate() error {
	if err := app.AtLeast(FlagConcurrentSyncs, o.ConcurrentSyncs, 1); err != nil {
		return err
	}
	if o.LoadBalancerClass != "" {
		// The API server accepts only label-style qualified names as classes.
		if errs := validation.IsQualifiedName(o.LoadBalancerClass); len(errs) > 0 {
			return &app.FlagError{Flag: FlagLoadBalancerClass, Err: fmt.Errorf("%q: %v", o.LoadBalancerClass, errs[0])}
		}
	}
	if _, err := o.PoolAPIs(); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Label(o.MetalLBNamespace); len(errs) > 0 {
		return &app.FlagError{Flag: FlagMetalLBNamespace, Err: fmt.Errorf("%q: %v", o.MetalLBNamespace, errs[0])}
	}
	return nil
}

// PoolAPIs parses PoolAPI: the APIs in the order given, without repeats. An empty list or
// an unknown name is an *app.FlagError.
func (o Options) PoolAPIs() ([]string, error) {
	var known []string
	for _, a := range poolsource.APIs {
		known = append(known, a.Name)
	}
	var out []string
	for _, s := range strings.Split(o.PoolAPI, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
			continue
		case slices.Contains(known, s):
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		default:
			return nil, &app.FlagError{Flag: FlagPoolAPI, Err: fmt.Errorf("%q is not a pool API; use a comma list of %s", s, quotedList(known))}
		}
	}
	if len(out) == 0 {
		return nil, &app.FlagError{Flag: FlagPoolAPI, Err: fmt.Errorf("empty; use a comma list of %s", quotedList(known))}
	}
	return out, nil
}

// quotedList is names quoted, joined by commas and a final "and".
func quotedList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

// Flags returns the controller's flags, each bound to its field of o; their defaults are o's
// values. New flag values on every call: app.Run adds environment variables to them in place.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		app.Bound(app.CategoryController, FlagConcurrentSyncs, &o.ConcurrentSyncs,
			"number of Services synced concurrently; more is faster but costs CPU and API calls"),
		app.Bound(app.CategoryController, FlagLoadBalancerClass, &o.LoadBalancerClass,
			"spec.loadBalancerClass of the Services to serve; empty serves Services with no class"),
		app.Bound(app.CategoryController, FlagPoolAPI, &o.PoolAPI,
			"comma list of the pool APIs addresses come from: kcm-split (lb.kcm-split.io IPAddressPool) and/or metallb (metallb.io/v1beta1 IPAddressPool and MetalLB's Service annotations)"),
		app.Bound(app.CategoryController, FlagMetalLBNamespace, &o.MetalLBNamespace,
			"namespace of the metallb.io IPAddressPools read with --pool-api=metallb: MetalLB's own namespace, whose pools its speaker announces"),
		app.Bound(app.CategoryController, FlagPendingCondition, &o.PendingCondition,
			"set the status condition LoadBalancerPending (reason and message: why) on a LoadBalancer Service waiting for an address, removed once it has one; off: upstream, which writes no Service condition"),
	}
}
