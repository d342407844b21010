package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"
	"k8s.io/component-base/featuregate"

	"github.com/kcm-split/kcm-split/shared/app/check"
	"github.com/kcm-split/kcm-split/shared/app/internal/cmdline"
	"github.com/kcm-split/kcm-split/shared/kube"
	"github.com/kcm-split/kcm-split/shared/metrics"
)

// Version is the kcm-split release, set at build time with
// -ldflags "-X github.com/kcm-split/kcm-split/shared/app.Version=v0.1.0".
var Version = "dev"

// Exit codes.
const (
	ExitOK      = cmdline.ExitOK
	ExitFailure = cmdline.ExitFailure // runtime failure, or a controller that did not stop after a lost Lease
	ExitUsage   = cmdline.ExitUsage   // bad flags or environment
)

// CheckCommand is the subcommand every binary has, `<binary> check ...`: it checks a running
// controller from outside, as `helm test` does (see package check).
const CheckCommand = check.Command

// Spec describes one controller binary.
type Spec struct {
	// ID is the controller ID: binary name, default Lease name, user agent.
	ID string
	// Usage is the one-line description shown by --help.
	Usage string
	// DefaultPort is the default port of the metrics and health server; each binary has its own
	// so that all of them run side by side on one host.
	DefaultPort int
	// DefaultQPS and DefaultBurst are the binary's client budget when --kube-api-qps and
	// --kube-api-burst are not given, shown as those flags' defaults by --help. Zero keeps
	// upstream's 20 and 30; a controller that costs several writes per object sets its own.
	DefaultQPS   float32
	DefaultBurst int
	// FeatureGates are the gates of --feature-gates that change what this controller does
	// (upstream's names, see shared/features); any other gate kube-controller-manager knows
	// is accepted and has no effect.
	FeatureGates []featuregate.Feature
	// Options are the controller's own settings, filled once from its flags. A Spec is
	// used for one run: parsing writes into Options.
	Options Options
	// Sharded gives the binary --shards and --shard-index (see shared/sharding): a shard
	// elects on a Lease of its own and its Run reads Runtime.Shard. Off, nothing changes.
	Sharded bool
	// Run builds informers and the controller and blocks until ctx ends. It is called only
	// while this process holds the Lease; the controller's settings are the Options the
	// Spec was built with (a closure over them), filled and validated by then.
	Run func(ctx context.Context, rt *Runtime) error
	// ProcessMetrics, when set, registers on the process's registry, when the process starts
	// (a standby too, before any term), the series that must exist before the controllers
	// run: a counter a rate or increase() reads must be scraped at 0 before its first
	// increment, or that increment is never seen. Options are filled by then. The
	// controllers reach the same registry as Runtime.ProcessRegistry.
	ProcessMetrics func(reg prometheus.Registerer)
}

// Options are a controller's own settings. Flags returns its flags under upstream names,
// each bound to a field of the receiver (cli's Destination), so parsing fills the struct
// once and nothing reads a flag back by name; it must return new flag values on every call
// (parsing adds environment variables to them in place). Validate checks the filled
// settings; an error exits with ExitUsage and should name the flag (see FlagError).
type Options interface {
	Flags() []cli.Flag
	Validate() error
}

// FlagError reports a bad flag value; Main prints it on one line and exits with ExitUsage.
type FlagError = kube.FlagError

// Main runs the binary and exits the process.
func Main(spec Spec) {
	os.Exit(Run(context.Background(), spec, os.Args, os.Stderr))
}

// Run is Main without os.Exit: it returns the exit code. SIGINT and SIGTERM end ctx's work
// gracefully; a second signal exits at once. `<binary> check ...` checks a running controller
// instead (see CheckCommand).
func Run(ctx context.Context, spec Spec, args []string, stderr io.Writer) int {
	// Before any client exists, whichever command runs (see metrics.InstallClientGoSinks).
	metrics.InstallClientGoSinks()
	if len(args) > 1 && args[1] == CheckCommand {
		return check.Run(ctx, spec.ID, Version, args[2:], stderr)
	}
	o, cl, err := parse(spec, args[1:])
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", spec.ID, err)
		return ExitUsage
	case cl.Help:
		cmdline.PrintHelp(stderr, spec.ID, spec.Usage, Version, cl.Flags)
		// Last, after --help and --version: the subcommand's flags are not the controller's.
		fmt.Fprintf(stderr, "\nCOMMANDS:\n   %s %s [options]  check a running %s (its /readyz and its Lease's holder), exit 0 or 1; --help lists its options\n", spec.ID, CheckCommand, spec.ID)
		return ExitOK
	case cl.Version:
		fmt.Fprintf(stderr, "%s version %s\n", spec.ID, Version)
		return ExitOK
	}
	err = run(ctx, spec, o, stderr)
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v\n", spec.ID, ue.err)
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", spec.ID, err)
		return ExitFailure
	}
}

// Parse applies the environment and args (without the program name) to spec's flags, filling
// spec.Options, and validates every setting, common and the controller's, as Run does before
// it connects anywhere. An error is what Run would print before exiting with ExitUsage.
func Parse(spec Spec, args []string) error {
	_, _, err := parse(spec, args)
	return err
}

// parse fills the common options and spec.Options from the environment and args, and
// validates them unless help or the version was asked for.
func parse(spec Spec, args []string) (*options, cmdline.Parsed, error) {
	o := &options{}
	flags := o.flags(spec)
	if spec.Options != nil {
		flags = append(flags, spec.Options.Flags()...)
	}
	cl, err := cmdline.Parse(spec.ID, withEnv(flags), args)
	if err != nil || cl.Help || cl.Version {
		return o, cl, err
	}
	return o, cl, o.complete(spec, cl.Ctx)
}

// usageError marks errors that exit with ExitUsage.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }
