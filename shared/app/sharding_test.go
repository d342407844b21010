package app

import (
	"errors"
	"testing"

	"github.com/kcm-split/kcm-split/shared/sharding"
)

// TestShardHashFlag: --shard-hash defaults to the mixed hash, names the shard's Lease and labels
// with --shards > 1, changes nothing with one shard, and refuses an unknown hash.
func TestShardHashFlag(t *testing.T) {
	spec := Spec{ID: "test-controller", Sharded: true}
	for _, tc := range []struct {
		args      []string
		wantHash  sharding.Hash
		wantLease string
		hashLabel string
	}{
		{[]string{"--shards=2", "--shard-index=1"}, sharding.HashMixed, "test-controller-shard-1-of-2-mixed", "mixed"},
		{[]string{"--shards=2", "--shard-index=1", "--shard-hash=fnv"}, sharding.HashFNV, "test-controller-shard-1-of-2", ""},
		{[]string{"--shards=1", "--shard-hash=mixed"}, sharding.HashMixed, "test-controller", ""},
		{nil, sharding.HashMixed, "test-controller", ""},
	} {
		o, _, err := parse(spec, tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if o.sharding.shard.Hash != tc.wantHash || o.leader.Name != tc.wantLease || o.leader.Labels[sharding.LabelHash] != tc.hashLabel {
			t.Errorf("%v: hash %q, Lease %q, labels %v; want %q, %q, hash label %q", tc.args, o.sharding.shard.Hash, o.leader.Name, o.leader.Labels, tc.wantHash, tc.wantLease, tc.hashLabel)
		}
	}
	_, _, err := parse(spec, []string{"--shards=2", "--shard-hash=md5"})
	var fe *FlagError
	if !errors.As(err, &fe) || fe.Flag != FlagShardHash {
		t.Errorf("--shard-hash=md5: %v, want a FlagError for --shard-hash", err)
	}
}
