// Package endpointscontroller is the endpoints-controller binary: kube-controller-manager's
// endpoints, endpointslice and endpointslice-mirroring controllers in one process, sharing
// informers and one client budget. Each controller is a package of its own (endpoints,
// endpointslice, mirroring, as upstream's pkg/controller/{endpoint,endpointslice,
// endpointslicemirroring}); what two of them share is under internal/. This package holds the
// binary's names, its Options (--controllers and the three packages' flags) and Spec, which
// composes them. Named for the binary, not its directory: endpoints/ is the package endpoints.
package endpointscontroller

import (
	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/services/endpoints/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/mirroring"
	"github.com/kcm-split/kcm-split/shared/app"
)

// Names this binary is known by, one constant each: the single source of truth for the binary
// and the Lease. Each controller's names (Name, ComponentName, QueueName) are in its package.
const (
	// ControllerID is kcm-split's id of this binary: its name and the default Lease name.
	ControllerID = "endpoints-controller"
	// DefaultPort is the default --secure-port: HTTPS metrics and health.
	DefaultPort = 10281
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

// FlagControllers is upstream's --controllers.
const FlagControllers = "controllers"

// knownControllers are the controllers this binary runs, all on by default, with upstream's
// aliases.
var knownControllers = []app.ControllerName{
	{Name: endpoints.Name, Aliases: []string{"endpoint"}},
	{Name: endpointslice.Name, Aliases: []string{"endpointslice"}},
	{Name: mirroring.Name, Aliases: []string{"endpointslicemirroring"}},
}

// Options are the binary's controller settings: which controllers run, and each one's own.
type Options struct {
	// Controllers is --controllers as given: upstream's syntax, a comma-separated list of
	// names to enable, "-name" to disable, "*" for every controller on by default.
	Controllers string
	// Endpoints are the Endpoints controller's settings.
	Endpoints endpoints.Options
	// EndpointSlice are the EndpointSlice controller's settings.
	EndpointSlice endpointslice.Options
	// Mirroring are the mirroring controller's settings.
	Mirroring mirroring.Options
}

// DefaultOptions returns upstream's defaults: every controller, each with its defaults.
func DefaultOptions() Options {
	return Options{
		Controllers:   "*",
		Endpoints:     endpoints.DefaultOptions(),
		EndpointSlice: endpointslice.DefaultOptions(),
		Mirroring:     mirroring.DefaultOptions(),
	}
}

// Validate reports the first bad value as an *app.FlagError.
func (o Options) Validate() error {
	_, err := o.Enabled()
	return app.FirstError(err, o.Endpoints.Validate(), o.EndpointSlice.Validate(), o.Mirroring.Validate())
}

// Enabled returns the controllers --controllers turns on, in kube-controller-manager's syntax
// (app.EnabledControllers).
func (o Options) Enabled() (map[string]bool, error) {
	return app.EnabledControllers(FlagControllers, o.Controllers, knownControllers)
}

// Flags returns --controllers and each controller's flags, each bound to its field of o;
// their defaults are o's values. New flag values on every call: app.Run adds environment
// variables to them in place.
func (o *Options) Flags() []cli.Flag {
	flags := []cli.Flag{
		app.Bound(app.CategoryController, FlagControllers, &o.Controllers, app.ControllersUsage(knownControllers)),
	}
	flags = append(flags, o.Endpoints.Flags()...)
	flags = append(flags, o.EndpointSlice.Flags()...)
	return append(flags, o.Mirroring.Flags()...)
}
