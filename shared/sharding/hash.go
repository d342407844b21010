package sharding

// Why the mixed hash is written here: the standard library's hash/maphash is seeded at random
// per process (every shard must compute the same value), hash/fnv is the KEP's function itself
// (the skew this answers), and hash/crc64 is linear (a family of names differing in their last
// characters differs by a fixed pattern). A hash package (xxhash) would be one more direct
// dependency for ten lines. So: the KEP's FNV-1a 64, then MurmurHash3's 64-bit finalizer
// (fmix64, Austin Appleby's published constants), which spreads every input bit over every
// output bit. It is a bijection of the KEP's value: two namespaces share a mixed hash exactly
// when they share the KEP's.

import (
	"fmt"
	"hash/fnv"
)

// Hash is the function of a namespace's name whose value a shard's range is cut from.
type Hash string

const (
	// HashFNV is KEP-5866's function, FNV-1a 64 of the name: the apiserver can apply the
	// range itself when its ShardedListAndWatch gate is on. Its top bits follow the first
	// characters of a name, so a family of names sharing a prefix falls into one range.
	HashFNV Hash = "fnv"
	// HashMixed is FNV-1a 64 followed by fmix64: names of one family spread over every range.
	// No apiserver computes it: every list and watch carries all namespaces and the shard
	// filters them itself (mode client).
	HashMixed Hash = "mixed"
)

// Hashes are the values --shard-hash takes.
var Hashes = []Hash{HashFNV, HashMixed}

// ParseHash reads a --shard-hash value; "" is HashFNV (a Lease without the hash label).
func ParseHash(s string) (Hash, error) {
	switch Hash(s) {
	case "", HashFNV:
		return HashFNV, nil
	case HashMixed:
		return HashMixed, nil
	}
	return "", fmt.Errorf("%q: the shard hash is %q or %q", s, HashFNV, HashMixed)
}

// Name is the hash's name, "" counting as HashFNV (Shard's zero value).
func (h Hash) Name() Hash {
	if h == "" {
		return HashFNV
	}
	return h
}

// ServerSide reports whether the apiserver can apply a range of this hash (ShardSelector).
func (h Hash) ServerSide() bool { return h.Name() == HashFNV }

// Sum is the hash of namespace.
func (h Hash) Sum(namespace string) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(namespace))
	v := f.Sum64()
	if h.Name() == HashMixed {
		v = fmix64(v)
	}
	return v
}

// fmix64 is MurmurHash3's 64-bit finalizer: xor-shifts and multiplications by two odd
// constants, each step invertible, after which every output bit depends on every input bit.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}
