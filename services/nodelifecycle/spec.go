package nodelifecycle

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcm-split/kcm-split/services/nodelifecycle/ipam"
	"github.com/kcm-split/kcm-split/services/nodelifecycle/tainteviction"
	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/features"
	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/leasestate"
)

// Spec describes the nodelifecycle-controller binary to app.Main.
func Spec() app.Spec {
	return app.WithOptions(app.Spec{
		ID:          ControllerID,
		Usage:       "marks silent Nodes Unknown, taints Nodes from their conditions, taints unreachable Nodes NoExecute at a zone-aware rate, evicts the Pods that do not tolerate it, and (with --allocate-node-cidrs) gives Nodes their Pod ranges",
		DefaultPort: DefaultPort,
		// NoExecute evictions are taint-eviction-controller's (see --controllers); locked on.
		FeatureGates: []featuregate.Feature{features.SeparateTaintEvictionController},
		// Three upstream controllers' budgets in one: see DefaultQPS.
		DefaultQPS:   DefaultQPS,
		DefaultBurst: DefaultBurst,
		// The foreign-writer counter, at 0 before any term.
		ProcessMetrics: func(reg prometheus.Registerer) { foreign.Register(reg, Name) },
	}, DefaultOptions(), run)
}

// run is called only while this process holds the Lease: it owns the informers, so a standby
// replica watches nothing. The controllers Options.Enabled chooses share the Node and Pod
// informers; each informer is created only by a controller that uses it.
func run(ctx context.Context, rt *app.Runtime, opts Options) error {
	enabled, err := opts.Enabled()
	if err != nil {
		return err // validated at parse time already
	}
	client := rt.Client
	resync := rt.ResyncPeriod()
	transform := informers.WithTransform(cacheTransform)
	// The Node informer's transform shows Nodes to the foreign-writer detector first, when
	// the controller that writes their taints and conditions runs.
	nodeTransform := transform
	var fw *foreignWriters
	if enabled[Name] {
		fw = newForeignWriters(ctx, rt)
		nodeTransform = informers.WithTransform(fw.transform)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, resync, nodeTransform)
	// Only Node Leases matter, and only Pods bound to a Node: pending Pods are never
	// marked or evicted, and can be many.
	leaseFactory := informers.NewSharedInformerFactoryWithOptions(client, resync, transform, informers.WithNamespace(v1.NamespaceNodeLease))
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, resync, transform,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	factories := []informer.Factory{factory, leaseFactory, podFactory}
	var controllers []app.Controller
	if enabled[Name] {
		c := New(
			factory.Core().V1().Nodes(),
			leaseFactory.Coordination().V1().Leases(),
			podFactory.Core().V1().Pods(),
			client,
			rt.EventRecorder(ctx, ComponentName),
			opts,
			rt.Registry,
		)
		// The partition episode and each zone's pace outlive this term when they are on:
		// kept beside the Lease, written only by its holder (rt.Client is fenced).
		if err := c.keepStateIn(client.CoreV1().ConfigMaps(rt.LeaseNamespace), leasestate.Name(rt.LeaseName, StateStoreSuffix)); err != nil {
			return err
		}
		// Read by the transform, which runs once the informers start.
		fw.nodes = factory.Core().V1().Nodes().Informer().GetStore()
		controllers = append(controllers, app.Controller{Name: Name, HasSynced: c.HasSynced, Run: c.Run})
	}
	if enabled[tainteviction.Name] {
		// Upstream's separate controller, on the same Node and Pod informers: it deletes the
		// Pods that do not tolerate their Node's NoExecute taints, whoever put them there
		// (mostly the controller above).
		evictor := tainteviction.New(factory.Core().V1().Nodes(), podFactory.Core().V1().Pods(), client,
			rt.EventRecorder(ctx, tainteviction.Name), rt.Registry)
		controllers = append(controllers, app.Controller{Name: tainteviction.Name, HasSynced: evictor.HasSynced, Run: evictor.Run})
	}
	if enabled[ipam.Name] {
		cfg, err := opts.IPAM.Config()
		if err != nil {
			return err // Validate has passed it already
		}
		// Node IPAM shares the Node informer; upstream gives it its own client and Events. Its
		// range claims (IPAddresses) are watched by label: only the allocators' own.
		claimFactory := informers.NewSharedInformerFactoryWithOptions(client, resync, transform,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ipam.ClaimSelector() }))
		allocator, err := ipam.New(factory.Core().V1().Nodes(), claimFactory.Networking().V1().IPAddresses(), client,
			rt.EventRecorder(ctx, ipam.ComponentName), cfg, rt.Registry)
		if err != nil {
			return err
		}
		controllers = append(controllers, app.Controller{Name: ipam.Name, HasSynced: allocator.HasSynced, Run: allocator.Run})
		factories = append(factories, claimFactory)
	}
	klog.FromContext(ctx).Info("Controllers enabled", "nodeLifecycle", enabled[Name],
		"taintEviction", enabled[tainteviction.Name], "nodeIPAM", enabled[ipam.Name])
	return rt.RunControllers(ctx, controllers, factories...)
}
