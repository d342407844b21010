package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/informer"
)

// Spec describes the quota-controller binary to app.Main.
func Spec() app.Spec {
	return app.Spec{
		ID:          ControllerID,
		Usage:       "keeps the status (hard limits and observed usage) of every ResourceQuota up to date",
		DefaultPort: DefaultPort,
		Flags:       flags(),
		Validate: func(c *cli.Context) error {
			return optionsFrom(c).Validate()
		},
		Run: run,
	}
}

// run is called only while this process holds the Lease: it owns the informers, so a standby
// replica watches nothing.
func run(ctx context.Context, rt *app.Runtime) error {
	opts := optionsFrom(rt.CLI)
	meta, err := metadata.NewForConfig(rt.Config)
	if err != nil {
		return fmt.Errorf("metadata client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(rt.Config)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}

	// Only managed fields are dropped from the quotas themselves: their status is written
	// back from the cached copy, and the status subresource keeps whatever metadata it is
	// sent (labels, annotations, owners, finalizers), so nothing else may be dropped. An
	// update without managed fields leaves the stored ones alone.
	factory := informers.NewSharedInformerFactoryWithOptions(rt.Client, 0, informers.WithTransform(informer.DropManagedFields))
	c := New(
		factory.Core().V1().ResourceQuotas(),
		rt.Client,
		meta,
		discoverWith(disc),
		rt.EventRecorder(ctx, ComponentName),
		opts,
		rt.Registry,
	)
	rt.SetSynced(c.HasSynced)
	return informer.Run(ctx, c.Run, factory)
}

// discoverWith lists the namespaced types that can be listed and watched, each in its
// preferred version. Subresources and types quota never counts are left out.
func discoverWith(d discovery.DiscoveryInterface) DiscoverFunc {
	return func() (map[schema.GroupResource]string, map[string]string, error) {
		lists, err := d.ServerPreferredNamespacedResources()
		failed := map[string]string{}
		var groupErr *discovery.ErrGroupDiscoveryFailed
		switch {
		case err == nil:
		case errors.As(err, &groupErr):
			for gv, e := range groupErr.Groups {
				failed[gv.Group] = e.Error()
			}
		case len(lists) == 0:
			return nil, nil, err
		}
		found := map[schema.GroupResource]string{}
		for _, list := range lists {
			gv, perr := schema.ParseGroupVersion(list.GroupVersion)
			if perr != nil {
				continue
			}
			for _, r := range list.APIResources {
				if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch") {
					continue
				}
				found[schema.GroupResource{Group: gv.Group, Resource: r.Name}] = gv.Version
			}
		}
		return found, failed, nil
	}
}
