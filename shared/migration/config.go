// Package migration is kcm-split's side of Leader Migration (KEP-2436): which controllers of a
// binary run, given a LeaderMigrationConfiguration, and the migration Lease kcm-split's binaries
// hold together, as a group, against kube-controller-manager.
package migration

import (
	"errors"
	"fmt"

	internal "k8s.io/controller-manager/config"
	"k8s.io/controller-manager/pkg/leadermigration"
	lmconfig "k8s.io/controller-manager/pkg/leadermigration/config"
)

// Names every kcm-split binary shares.
const (
	// Component is kcm-split's component name in a LeaderMigrationConfiguration, and the
	// holder identity of the migration Lease while kcm-split's group holds it.
	Component = "kcm-split"
	// DefaultLeaderName is the migration Lease's name when no configuration file is given.
	DefaultLeaderName = "kcm-split-migration"
)

// Filter results, upstream's: how a binary treats each of its controllers.
const (
	// Unowned: listed for another component; never run here.
	Unowned = leadermigration.ControllerUnowned
	// Migrated: listed for kcm-split or "*"; run only while the group holds the migration Lease.
	Migrated = leadermigration.ControllerMigrated
	// NotListed: not in the configuration; run under the binary's own Lease as without migration.
	NotListed = leadermigration.ControllerNonMigrated
)

// Config is a read and validated LeaderMigrationConfiguration.
type Config struct {
	// LeaderName is the migration Lease's name (in --leader-elect-resource-namespace).
	LeaderName string
	// leaders is the file's controllerLeaders; nil for the default configuration, which gives
	// every controller of the binary to kcm-split.
	leaders []internal.ControllerLeaderConfiguration
}

// Load reads and validates the LeaderMigrationConfiguration at path with upstream's reader;
// an empty path is the default configuration. Only the "leases" resource lock is accepted:
// kcm-split never writes Endpoints locks.
func Load(path string) (*Config, error) {
	if path == "" {
		return &Config{LeaderName: DefaultLeaderName}, nil
	}
	cfg, err := lmconfig.ReadLeaderMigrationConfiguration(path)
	if err != nil {
		return nil, err
	}
	if errs := lmconfig.ValidateLeaderMigrationConfiguration(cfg); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", path, errs.ToAggregate())
	}
	if cfg.ResourceLock != lmconfig.ResourceLockLeases {
		return nil, fmt.Errorf("%s: resourceLock %q is not supported, only %q", path, cfg.ResourceLock, lmconfig.ResourceLockLeases)
	}
	if len(cfg.ControllerLeaders) == 0 {
		// Upstream accepts it; here it would make every controller "not listed" and the
		// flag a silent no-op, which is never what an operator enabling migration means.
		return nil, fmt.Errorf("%s: %w", path, errors.New("controllerLeaders is empty"))
	}
	return &Config{LeaderName: cfg.LeaderName, leaders: cfg.ControllerLeaders}, nil
}

// Filter returns upstream's classification of the named controllers for component kcm-split.
// names are the binary's controllers (kube-controller-manager's names); the default
// configuration lists each of them for kcm-split.
func (c *Config) Filter(names []string) leadermigration.FilterFunc {
	leaders := c.leaders
	if leaders == nil {
		for _, n := range names {
			leaders = append(leaders, internal.ControllerLeaderConfiguration{Name: n, Component: Component})
		}
	}
	cfg := &internal.LeaderMigrationConfiguration{LeaderName: c.LeaderName, ResourceLock: lmconfig.ResourceLockLeases, ControllerLeaders: leaders}
	return leadermigration.NewLeaderMigrator(cfg, Component).FilterFunc
}
