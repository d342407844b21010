package mirroring

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/shared/sharding"
)

// TestShardedUnmirrorNeedsALiveNotFound: a sharded controller whose cache lost a Service that
// still exists keeps the mirrored slices; once the Service is gone live too, they go. Keys of
// other shards' namespaces are not synced at all.
func TestShardedUnmirrorNeedsALiveNotFound(t *testing.T) {
	shard := sharding.Shard{Index: 0, Count: 2}
	if !shard.Owns(testobj.NS) {
		shard.Index = 1
	}
	f := newFixture(t, Options{ConcurrentSyncs: 1, MaxEndpointsPerSubset: 100, Shard: shard})
	ep := customEndpoints(v1.EndpointSubset{Addresses: addrs("10.0.0.1"), Ports: port80})
	ep.Namespace = testobj.NS
	svc := selectorless("ext")
	if _, err := f.client.CoreV1().Services(testobj.NS).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.cache(svc, ep)
	key := testobj.NS + "/ext"
	if w, err := f.sync(key); err != nil || !slices.Equal(w, []string{"create"}) {
		t.Fatalf("first sync: writes %v, err %v; want one create", w, err)
	}
	f.catchUp()

	// The Service leaves this shard's cache, not the API.
	if err := f.services.Delete(svc); err != nil {
		t.Fatal(err)
	}
	if w, err := f.sync(key); err == nil || len(w) != 0 {
		t.Fatalf("Service missing from the cache but live: writes %v, err %v; want none and an error (retry)", w, err)
	}
	// Gone for real.
	if err := f.client.CoreV1().Services(testobj.NS).Delete(context.Background(), "ext", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if w, err := f.sync(key); err != nil || !slices.Equal(w, []string{"delete"}) {
		t.Fatalf("Service gone live: writes %v, err %v; want one delete", w, err)
	}

	other := sharding.Shard{Index: 1 - shard.Index, Count: 2}
	g := newFixture(t, Options{ConcurrentSyncs: 1, MaxEndpointsPerSubset: 100, Shard: other})
	g.cache(selectorless("ext"), ep)
	if w, err := g.sync(key); err != nil || len(w) != 0 {
		t.Fatalf("another shard's key: writes %v, err %v; want nothing", w, err)
	}
}
