// Package sharding splits a namespaced controller's work over static shards by namespace:
// shard I of N owns the namespaces whose FNV-1a 64-bit hash falls in the I-th of N equal
// ranges of the hash space, the function the apiserver applies for
// shardRange(object.metadata.namespace, lo, hi) (KEP-5866, k8s.io/apimachinery/pkg/sharding).
// It asks the apiserver to filter lists and watches (ListOptions.ShardSelector), filters
// every object again on the client side (the apiserver ignores the selector when its
// ShardedListAndWatch gate is off), reports which of the two did the work, and keeps the
// shard Leases of two layouts (N and M shards) from writing at the same time (Layout).
package sharding

import (
	"fmt"
	"math/big"
	"strconv"

	apisharding "k8s.io/apimachinery/pkg/sharding"
)

// KeyNamespace is the field every shard range is on: a Service selects Pods of its own
// namespace only, and quota counts namespaced objects only, so a namespace never spans shards.
const KeyNamespace = "object.metadata.namespace"

// Labels on the Lease of a process that takes part in the layout protocol (see Layout).
const (
	LabelBinary = "kcm-split.io/shard-binary"
	LabelShards = "kcm-split.io/shards"
	LabelIndex  = "kcm-split.io/shard-index"
)

// Shard is one shard of a static layout: Index of Count (0 <= Index < Count).
type Shard struct {
	Index int
	Count int
}

// Whole is the unsharded layout: one shard owning every namespace.
var Whole = Shard{Index: 0, Count: 1}

// Sharded reports whether this shard owns less than everything.
func (s Shard) Sharded() bool { return s.Count > 1 }

// Validate checks 1 <= Count and 0 <= Index < Count; the error names the setting at fault
// as "shards" or "shard-index" (the flags' names) in Field.
func (s Shard) Validate() error {
	switch {
	case s.Count < 1:
		return &Error{Field: "shards", Err: fmt.Errorf("%d: the number of shards must be at least 1", s.Count)}
	case s.Count > MaxShards:
		return &Error{Field: "shards", Err: fmt.Errorf("%d: at most %d shards", s.Count, MaxShards)}
	case s.Index < 0 || s.Index >= s.Count:
		return &Error{Field: "shard-index", Err: fmt.Errorf("%d is not a shard of 0..%d (--shards=%d)", s.Index, s.Count-1, s.Count)}
	}
	return nil
}

// MaxShards bounds --shards: far beyond any use (each shard still watches every Node), and
// small enough that every range holds many namespaces' hashes.
const MaxShards = 256

// Error is a bad shard setting.
type Error struct {
	Field string
	Err   error
}

func (e *Error) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// String is "I-of-N".
func (s Shard) String() string { return strconv.Itoa(s.Index) + "-of-" + strconv.Itoa(s.Count) }

// Range returns the shard's half-open range [lo, hi) of the 64-bit hash space as the
// apiserver's selector writes bounds: "0x" and 16 hex digits, the last upper bound being
// 2^64 ("0x10000000000000000").
func (s Shard) Range() (lo, hi string) {
	space := new(big.Int).Lsh(big.NewInt(1), 64)
	bound := func(i int) string {
		b := new(big.Int).Mul(space, big.NewInt(int64(i)))
		b.Div(b, big.NewInt(int64(s.Count)))
		return fmt.Sprintf("0x%016x", b)
	}
	return bound(s.Index), bound(s.Index + 1)
}

// Selector is the shard's range of namespaces as an apimachinery selector: its String is the
// ListOptions.ShardSelector sent, its Matches the client-side check.
func (s Shard) Selector() apisharding.Selector {
	lo, hi := s.Range()
	return apisharding.NewSelector(apisharding.ShardRangeRequirement{Key: KeyNamespace, Start: lo, End: hi})
}

// Owns reports whether namespace is in the shard's range. Cluster-scoped objects (namespace
// "") all hash alike: never ask Owns about them.
func (s Shard) Owns(namespace string) bool {
	if !s.Sharded() {
		return true
	}
	lo, hi := s.Range()
	h := "0x" + apisharding.HashField(namespace)
	return !apisharding.HexLess(h, lo) && apisharding.HexLess(h, hi)
}

// LeaseName is the Lease of this shard: base for the unsharded layout (today's Lease),
// "<base>-shard-<I>-of-<N>" otherwise, so that each shard elects on its own and two layouts
// never share a Lease.
func (s Shard) LeaseName(base string) string {
	if !s.Sharded() {
		return base
	}
	return base + "-shard-" + s.String()
}

// LeaseLabels are the labels naming binary and layout on the shard's Lease (see Layout).
func (s Shard) LeaseLabels(binary string) map[string]string {
	return map[string]string{LabelBinary: binary, LabelShards: strconv.Itoa(s.Count), LabelIndex: strconv.Itoa(s.Index)}
}
