package app

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/leader"
	"github.com/kcm-split/kcm-split/shared/sharding"
)

// shardingOptions are --shards, --shard-index and --shard-hash, for a Spec with Sharded.
type shardingOptions struct {
	shard sharding.Shard
	hash  string // --shard-hash as given
	// given tells whether either flag was given, which makes the process take part in the
	// layout protocol (labelled Lease, Layout fence).
	given     bool
	baseLease string // --leader-elect-resource-name as given: the unsharded Lease's name
}

func (o *shardingOptions) flags(spec Spec) []cli.Flag {
	if !spec.Sharded {
		return nil
	}
	o.shard = sharding.Whole
	return []cli.Flag{
		&cli.IntFlag{
			Name:        FlagShards,
			Category:    "Sharding",
			Value:       1,
			Destination: &o.shard.Count,
			Usage: "number of static shards the namespaces are split into (by a hash of the namespace name, KEP-5866 " +
				"ranges); each shard elects on its own Lease <lease name>-shard-<index>-of-<shards> and caches only " +
				"its namespaces' objects (cluster-scoped ones whole). 1 is one replica for everything, upstream's " +
				"behaviour. Given (even as 1), the process waits until no Lease of another --shards of this binary " +
				"is held before it campaigns or writes",
		},
		&cli.IntFlag{Name: FlagShardIndex, Category: "Sharding", Value: 0, Destination: &o.shard.Index, Usage: "this process's shard, 0 to --shards minus 1"},
		&cli.StringFlag{
			Name:        FlagShardHash,
			Category:    "Sharding",
			Value:       string(DefaultShardHash),
			Destination: &o.hash,
			Usage: "the hash of the namespace name the shard ranges are cut from: mixed (FNV-1a 64 then a 64-bit finalizer: " +
				"namespaces of one name family spread over every shard; the apiserver cannot compute it, so every shard " +
				"lists and watches all namespaces and filters them itself) or fnv (KEP-5866's own hash: the apiserver " +
				"filters for each shard when its ShardedListAndWatch gate is on, but names sharing a prefix fall in one " +
				"shard). The two are two layouts: a shard's Lease of mixed is <lease name>-shard-<index>-of-<shards>-mixed, " +
				"and a change of hash waits for the other hash's Leases as a change of --shards does",
		},
	}
}

// DefaultShardHash is --shard-hash's default: the mixed hash. ShardedListAndWatch is alpha and
// off in almost every cluster, where the KEP's hash buys nothing and leaves name families in one
// shard (shared/README.md, "Sharding", has the measured spread).
const DefaultShardHash = sharding.HashMixed

// complete validates the shard and, when --shards or --shard-index was given, names and labels
// the shard's own Lease in election.
func (o *shardingOptions) complete(spec Spec, c *cli.Context, election *leader.Config) error {
	if !spec.Sharded {
		o.shard = sharding.Whole
		return nil
	}
	o.shard.Hash = sharding.Hash(o.hash)
	if err := o.shard.Validate(); err != nil {
		var se *sharding.Error
		if errors.As(err, &se) {
			return &FlagError{Flag: se.Field, Err: se.Err}
		}
		return err
	}
	// --shard-hash alone does not make the process take part: without --shards it is one
	// shard, whose layout no hash changes.
	o.given = c.IsSet(FlagShards) || c.IsSet(FlagShardIndex)
	o.baseLease = election.Name
	if o.given {
		election.Name = o.shard.LeaseName(election.Name)
		election.Labels = o.shard.LeaseLabels(spec.ID)
	}
	return nil
}

// startShard gives a sharded Runtime its View and, when the process takes part in the layout
// protocol with election on, starts the Layout fence: writes also need no other layout's Lease
// held and fresh.
func (p *process) startShard(ctx context.Context, spec Spec, o *options) {
	if o.sharding.shard.Sharded() {
		p.rt.ShardView = sharding.NewView(o.sharding.shard, spec.ID, p.reg, p.rt.Logger)
	}
	if !o.sharding.given || !o.leader.Enabled {
		return
	}
	p.rt.layout = sharding.NewLayout(leaderClient(p.cfg), sharding.LayoutOptions{
		Binary: spec.ID, Namespace: o.leader.Namespace, BaseLease: o.sharding.baseLease, Shard: o.sharding.shard,
		LeaseDuration: o.leader.LeaseDuration, Recheck: o.leader.RetryPeriod,
		// A Lease left expired by a layout gone before this process started blocks until its
		// renewTime + duration + this: a lease duration (15 s by default) of clock skew
		// allowed between hosts, far beyond what NTP leaves.
		ClockSkew: o.leader.LeaseDuration,
	}, p.reg)
	p.rt.layout.Start(ctx)
	p.elector.FenceAlso(leader.ReasonOtherLayout, p.rt.layout.AllowWrite)
}
