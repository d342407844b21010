package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kcm-split/kcm-split/shared/app/internal/cmdline"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/leader"
)

// Controller is one controller of a binary, as the runner sees it.
type Controller struct {
	// Name is kube-controller-manager's name for the controller: in logs and errors, and the name
	// a LeaderMigrationConfiguration lists it by (--leader-migration-config).
	Name string
	// HasSynced reports whether the controller's caches have seen every listed object.
	HasSynced func() bool
	// Run blocks until its context ends or the controller fails.
	Run func(context.Context) error
}

// RunControllers is the one way a binary runs its controllers for a term. /readyz waits until
// every controller has synced; the factories' informers start; every controller runs until ctx
// ends. The first controller to fail stops the others (a term is all of a binary's controllers
// or none: the Lease covers them together) and the term ends with every failure, each named
// for its controller, joined. Informers stop once every controller has returned.
//
// With --enable-leader-migration, the controllers the migration configuration gives to another
// component are left out, and a term with migrated controllers waits for, and lasts no longer
// than, this process's membership in the migration Lease's group (see runMigrated). With
// --take-over-from-kcm, a term's controllers wait for, and last no longer than, proof that
// kube-controller-manager runs none of them (see runTakeOver).
func (rt *Runtime) RunControllers(ctx context.Context, controllers []Controller, factories ...informer.Factory) error {
	switch {
	case rt.migration != nil:
		return rt.runMigrated(ctx, controllers, factories)
	case rt.takeOver != nil:
		return rt.runTakeOver(ctx, controllers, factories)
	}
	return rt.runControllers(ctx, controllers, factories)
}

func (rt *Runtime) runControllers(ctx context.Context, controllers []Controller, factories []informer.Factory) error {
	synced := func() bool {
		for _, c := range controllers {
			if !c.HasSynced() {
				return false
			}
		}
		return true
	}
	rt.SetSynced(synced)
	go rt.logSynced(ctx, synced)
	return informer.Run(ctx, func(ctx context.Context) error { return runAll(ctx, controllers) }, factories...)
}

// logSynced logs leader.MsgSynced once synced() holds, asking every 5 ms for the first 2 s (what a
// handover's timing needs) and every 100 ms after that, until ctx ends.
func (rt *Runtime) logSynced(ctx context.Context, synced func() bool) {
	start := time.Now()
	for !synced() {
		period := 5 * time.Millisecond
		if time.Since(start) > 2*time.Second {
			period = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
	rt.Logger.Info(leader.MsgSynced, "lease", rt.LeaseNamespace+"/"+rt.LeaseName, "afterStart", time.Since(start).Round(time.Millisecond))
}

// controllerNames are the controllers' names, in order.
func controllerNames(controllers []Controller) []string {
	names := make([]string, 0, len(controllers))
	for _, c := range controllers {
		names = append(names, c.Name)
	}
	return names
}

// runAll runs every controller until ctx ends; the first failure cancels the rest.
func runAll(ctx context.Context, controllers []Controller) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(controllers))
	var wg sync.WaitGroup
	for i, c := range controllers {
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("%s: %w", c.Name, err)
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ControllerName is a controller --controllers can name: kube-controller-manager's name for
// it and upstream's aliases.
type ControllerName struct {
	Name    string
	Aliases []string
	// DisabledByDefault keeps the controller off under "*": it runs only when named.
	DisabledByDefault bool
}

// EnabledControllers reads a --controllers value in kube-controller-manager's syntax against
// the controllers a binary runs: a comma-separated list where "name" turns a controller on,
// "-name" turns it off and "*" turns on every controller not disabled by default; the first
// entry naming a controller (by name or alias) decides. It returns the canonical names turned
// on (every one it holds is true). Names the binary does not run are refused, all of them in one error,
// and so is a value that turns every controller off.
//
// Hand-written: upstream's IsControllerEnabled (k8s.io/controller-manager/app) would bring
// k8s.io/apiserver's server packages into every binary.
func EnabledControllers(flag, value string, known []ControllerName) (map[string]bool, error) {
	canonical := map[string]string{}
	var names []string
	for _, k := range known {
		names = append(names, k.Name)
		canonical[k.Name] = k.Name
		for _, a := range k.Aliases {
			canonical[a] = k.Name
		}
	}
	var entries, unknown []string
	for e := range strings.SplitSeq(value, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		entries = append(entries, e)
		if name := strings.TrimPrefix(e, "-"); e != "*" && canonical[name] == "" {
			unknown = append(unknown, fmt.Sprintf("%q", name))
		}
	}
	if len(unknown) > 0 {
		return nil, &FlagError{Flag: flag, Err: fmt.Errorf("unknown controllers %s (this binary runs %s)",
			strings.Join(unknown, ", "), strings.Join(names, ", "))}
	}
	enabled := map[string]bool{}
	for _, k := range known {
		if cmdline.Enabled(k.Name, k.DisabledByDefault, entries, canonical) {
			enabled[k.Name] = true
		}
	}
	if len(enabled) == 0 {
		return nil, &FlagError{Flag: flag, Err: fmt.Errorf("%q enables none of %s", value, strings.Join(names, ", "))}
	}
	return enabled, nil
}

// ControllersUsage is the --controllers usage line for known.
func ControllersUsage(known []ControllerName) string {
	var names []string
	for _, k := range known {
		n := k.Name
		if k.DisabledByDefault {
			n += " (off by default)"
		}
		names = append(names, n)
	}
	return "controllers to run: '*' runs all (" + strings.Join(names, ", ") +
		"), 'foo' enables foo, '-foo' disables foo; kube-controller-manager's names and aliases"
}
