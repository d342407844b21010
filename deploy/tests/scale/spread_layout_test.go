package scale

import (
	"slices"
	"strings"
	"testing"

	"github.com/kcm-split/kcm-split/shared/sharding"
)

// TestShardSpread: a run's layouts are each count with each hash and one shard once; at every
// size each layout's shards together own every application namespace and every Pod, the hot
// namespace in the shard the report names, and the names are the realistic ones, not a
// counter.
func TestShardSpread(t *testing.T) {
	both := []sharding.Hash{sharding.HashFNV, sharding.HashMixed}
	ls := shardLayouts([]int{1, 2, 4}, both)
	var got []string
	for _, l := range ls {
		got = append(got, l.String())
	}
	if want := []string{"1", "2 fnv", "2 mixed", "4 fnv", "4 mixed"}; !slices.Equal(got, want) {
		t.Fatalf("layouts %v, want %v", got, want)
	}
	for _, name := range []string{"XS", "S", "M", "L"} {
		sz := sizes[name]
		c := &cluster{sz: sz, hotPods: make([]podRef, hotPodsTotal)}
		perNS := servicesPerNS * sz.podsPerService
		for _, l := range ls {
			nss, pods := c.perShard(l, perNS)
			nsSum, podSum := 0, 0
			for i := range nss {
				nsSum += nss[i]
				podSum += pods[i]
			}
			if nsSum != sz.appNamespaces() || podSum != sz.pods()+hotPodsTotal {
				t.Errorf("%s %s: %d namespaces and %d Pods over the shards, want %d and %d", name, l, nsSum, podSum, sz.appNamespaces(), sz.pods()+hotPodsTotal)
			}
			if h := hotShard(l); pods[h] < hotPodsTotal {
				t.Errorf("%s %s: hot shard %d holds %d Pods, fewer than the hot namespace", name, l, h, pods[h])
			}
		}
		t.Logf("size %s:\n%s", name, c.spread(ls))
	}
	for i := range sizes["L"].appNamespaces() {
		if !isAppKey(appNS(i)+"/x") || strings.HasSuffix(appNS(i), "-app") {
			t.Fatalf("appNS(%d) = %q: not a realistic application namespace", i, appNS(i))
		}
	}
	if !isAppKey(hotNS+"/x") || isAppKey(otherNS(0)+"/x") {
		t.Errorf("isAppKey: the hot namespace is an application namespace, %s is not", otherNS(0))
	}
}
