// Package sharding splits a namespaced controller's work over static shards by namespace:
// shard I of N owns the namespaces whose 64-bit hash falls in the I-th of N equal ranges of
// the hash space. The hash is either KEP-5866's (FNV-1a 64, the function the apiserver applies
// for shardRange(object.metadata.namespace, lo, hi), k8s.io/apimachinery/pkg/sharding) or a
// well-mixed one the apiserver cannot compute (Hash). With the KEP's hash it asks the
// apiserver to filter lists and watches (ListOptions.ShardSelector); with either it filters
// every object on the client side (the apiserver ignores the selector when its
// ShardedListAndWatch gate is off), reports which of the two did the work, and keeps the
// shard Leases of two layouts (N and M shards, or two hashes) from writing at the same time
// (Layout).
package sharding

import (
	"fmt"
	"math/bits"
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
	// LabelHash names the hash of a sharded layout other than HashFNV; a Lease without it
	// is of HashFNV (the layouts before the choice of hash).
	LabelHash = "kcm-split.io/shard-hash"
)

// Shard is one shard of a static layout: Index of Count (0 <= Index < Count) of the ranges of
// Hash ("" is HashFNV). Two layouts of the same Count and another Hash are two layouts.
type Shard struct {
	Index int
	Count int
	Hash  Hash
}

// Whole is the unsharded layout: one shard owning every namespace.
var Whole = Shard{Index: 0, Count: 1}

// Sharded reports whether this shard owns less than everything.
func (s Shard) Sharded() bool { return s.Count > 1 }

// Validate checks 1 <= Count, 0 <= Index < Count and Hash; the error names the setting at
// fault as "shards", "shard-index" or "shard-hash" (the flags' names) in Field.
func (s Shard) Validate() error {
	switch {
	case s.Count < 1:
		return &Error{Field: "shards", Err: fmt.Errorf("%d: the number of shards must be at least 1", s.Count)}
	case s.Count > MaxShards:
		return &Error{Field: "shards", Err: fmt.Errorf("%d: at most %d shards", s.Count, MaxShards)}
	case s.Index < 0 || s.Index >= s.Count:
		return &Error{Field: "shard-index", Err: fmt.Errorf("%d is not a shard of 0..%d (--shards=%d)", s.Index, s.Count-1, s.Count)}
	}
	if _, err := ParseHash(string(s.Hash)); err != nil {
		return &Error{Field: "shard-hash", Err: err}
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

// bound is the lower bound of range i of n as a 64-bit value: floor(2^64*i/n), for 0 <= i < n.
func bound(i, n int) uint64 {
	q, _ := bits.Div64(uint64(i), 0, uint64(n))
	return q
}

// Range returns the shard's half-open range [lo, hi) of the 64-bit hash space as the
// apiserver's selector writes bounds: "0x" and 16 hex digits, the last upper bound being
// 2^64 ("0x10000000000000000").
func (s Shard) Range() (lo, hi string) {
	lo = fmt.Sprintf("0x%016x", bound(s.Index, s.Count))
	if s.Index+1 == s.Count {
		return lo, "0x10000000000000000"
	}
	return lo, fmt.Sprintf("0x%016x", bound(s.Index+1, s.Count))
}

// Selector is the shard's range of namespaces as an apimachinery selector: its String is the
// ListOptions.ShardSelector sent. It is of the KEP's hash: meaningless for another Hash
// (Hash.ServerSide), whose shards send none.
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
	return s.OwnsSum(s.Hash.Sum(namespace))
}

// OwnsSum reports whether a hash value (of s.Hash) is in the shard's range.
func (s Shard) OwnsSum(h uint64) bool {
	if h < bound(s.Index, s.Count) {
		return false
	}
	return s.Index+1 == s.Count || h < bound(s.Index+1, s.Count)
}

// Layout names the shard's layout: "N shards", plus ", hash H" for a sharded layout of a hash
// other than HashFNV. One shard owns everything whatever its hash: one layout.
func (s Shard) Layout() string { return layoutName(strconv.Itoa(s.Count), s.Hash) }

func layoutName(count string, h Hash) string {
	if count == "1" || h.Name() == HashFNV {
		return count + " shards"
	}
	return count + " shards, hash " + string(h)
}

// LeaseName is the Lease of this shard: base for the unsharded layout (today's Lease),
// "<base>-shard-<I>-of-<N>" otherwise, with "-<hash>" after it for a hash other than HashFNV,
// so that each shard elects on its own and two layouts never share a Lease.
func (s Shard) LeaseName(base string) string {
	if !s.Sharded() {
		return base
	}
	return base + "-shard-" + s.String() + s.hashSuffix()
}

func (s Shard) hashSuffix() string {
	if s.Hash.Name() == HashFNV {
		return ""
	}
	return "-" + string(s.Hash)
}

// LeaseLabels are the labels naming binary and layout on the shard's Lease (see Layout): the
// hash only when sharded with another hash than HashFNV, so that the Leases of a layout of the
// KEP's hash keep the labels they had before the choice of hash.
func (s Shard) LeaseLabels(binary string) map[string]string {
	l := map[string]string{LabelBinary: binary, LabelShards: strconv.Itoa(s.Count), LabelIndex: strconv.Itoa(s.Index)}
	if s.Sharded() && s.Hash.Name() != HashFNV {
		l[LabelHash] = string(s.Hash)
	}
	return l
}
