package endpointscontroller_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	endpointscontroller "github.com/kcm-split/kcm-split/services/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// gatedEnv starts a second control plane like the package's, with the apiserver's
// ShardedListAndWatch gate on, for this test alone.
func gatedEnv(t *testing.T) *testenv.Env {
	t.Helper()
	testenv.Require(t, env)
	start := time.Now()
	e, err := testenv.Start(envOptions("--feature-gates=ShardedListAndWatch=true"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	t.Logf("control plane with ShardedListAndWatch=true ready in %s", time.Since(start).Round(time.Millisecond))
	return e
}

func TestTwoShardsGateOn(t *testing.T) {
	e := gatedEnv(t)
	t.Run("fnv", func(t *testing.T) { twoShards(t, e, sharding.HashFNV, sharding.ModeServer) })
	// The mixed hash sends no selector: the shards filter themselves even with the gate on.
	t.Run("mixed", func(t *testing.T) { twoShards(t, e, sharding.HashMixed, sharding.ModeClient) })
}

func TestTwoShardsGateOff(t *testing.T) {
	testenv.Require(t, env)
	twoShards(t, env, sharding.HashFNV, sharding.ModeClient)
}

// shardNamespaces creates namespaces until each of count shards of the KEP's hash owns at least
// two (bounded: 40 tries; the hash spreads them evenly, so a dozen is usual) and returns them by
// owner.
func shardNamespaces(t *testing.T, e *testenv.Env, count int) map[int][]string {
	return hashNamespaces(t, e, count, sharding.HashFNV)
}

// hashNamespaces is shardNamespaces for the shards of hash.
func hashNamespaces(t *testing.T, e *testenv.Env, count int, hash sharding.Hash) map[int][]string {
	t.Helper()
	owned := map[int][]string{}
	for range 40 {
		ns := e.Namespace(t)
		for i := range count {
			if (sharding.Shard{Index: i, Count: count, Hash: hash}).Owns(ns) {
				owned[i] = append(owned[i], ns)
			}
		}
		done := true
		for i := range count {
			done = done && len(owned[i]) >= 2
		}
		if done {
			return owned
		}
	}
	t.Fatalf("40 namespaces did not give each of %d shards two: %v", count, owned)
	return nil
}

// twoShards: two shards of endpoints-controller side by side each write the Endpoints and
// slices of their own namespaces only, and together leave exactly what one replica would
// have written: an unsharded controller started over their result writes nothing.
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func twoShards(t *testing.T, e *testenv.Env, hash sharding.Hash, wantMode string) {
	c := e.Client(t)
	leases := e.Namespace(t)
	owned := hashNamespaces(t, e, 2, hash)
	all := slices.Concat(owned[0], owned[1])
	sel := map[string]string{"app": "web"}
	for k, ns := range all {
		createService(t, c, makeService(ns, "web", sel))
		createPod(t, c, makePod(ns, "web-0", fmt.Sprintf("10.7.%d.1", k), sel))
		createPod(t, c, makePod(ns, "web-1", fmt.Sprintf("10.7.%d.2", k), sel))
	}

	start := time.Now()
	shards := e.StartShards(t, controller, 2, hash, "shard", leases)
	for _, ns := range all {
		waitEndpoints(t, c, ns, "web", "two ready addresses", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 2 })
		waitSliceEndpoints(t, c, ns, "web", 2)
	}
	t.Logf("2 shards: %d Services in %d+%d namespaces done %s after start", len(all), len(owned[0]), len(owned[1]), time.Since(start).Round(time.Millisecond))

	for i, s := range shards {
		for _, r := range []string{"pods", "services", "endpoints", "endpointslices"} {
			series := fmt.Sprintf(`kcm_split_shard_info{binary=%q,mode=%q,resource=%q,shard="%d",shards="2"}`, endpointscontroller.ControllerID, wantMode, r, i)
			if v := s.Metric(series); v != 1 {
				t.Errorf("shard %d: %s = %v, want 1", i, series, v)
			}
		}
	}

	// kcm_split_shard_objects: each shard counts at least its namespaces' Pods, and the shards
	// together every Pod of the cluster (other tests' namespaces included), each once.
	pods, err := c.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	counted := func(i int) float64 {
		return shards[i].Metric(fmt.Sprintf(`kcm_split_shard_objects{binary=%q,resource="pods",shard="%d",shards="2"}`, endpointscontroller.ControllerID, i))
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return counted(0)+counted(1) == float64(len(pods.Items)), nil
	}); err != nil {
		t.Errorf("kcm_split_shard_objects{resource=pods}: %v + %v, the cluster has %d Pods", counted(0), counted(1), len(pods.Items))
	}
	for i := range shards {
		if n := counted(i); n < float64(2*len(owned[i])) {
			t.Errorf("shard %d counts %v Pods, its %d namespaces hold %d", i, n, len(owned[i]), 2*len(owned[i]))
		}
	}

	// Every write in a namespace came from the shard that owns it.
	evs, err := e.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "endpoints", "endpointslices"))
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{} // namespace -> identity of its shard
	for i, s := range shards {
		for _, ns := range owned[i] {
			owner[ns] = s.Identity()
		}
	}
	wrote := map[string]int{}
	for _, ev := range evs {
		want, ours := owner[ev.ObjectRef.Namespace]
		if !ours {
			continue
		}
		if ev.Identity() != want {
			t.Errorf("%s %s %s/%s written by %s, not by its shard %s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name, ev.Identity(), want)
		}
		wrote[ev.Identity()]++
	}
	for i, s := range shards {
		if wrote[s.Identity()] == 0 {
			t.Errorf("shard %d wrote nothing", i)
		}
	}

	// One replica over the shards' result: nothing to write.
	for _, s := range shards {
		s.Stop(30 * time.Second)
	}
	before := time.Now()
	whole := e.StartLeading(t, controller, "whole", "--leader-elect-resource-namespace="+leases)
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		queues := []string{endpoints.QueueName, endpointslice.QueueName}
		for _, q := range queues {
			if whole.Metric(`workqueue_adds_total{name="`+q+`"}`) < float64(len(all)) {
				return false, nil
			}
		}
		return whole.QueuesIdle(queues...), nil
	}); err != nil {
		t.Fatalf("the unsharded controller never drained its queues: %v", err)
	}
	evs, err = e.Writes(testenv.ByIdentity(whole.Identity()), testenv.ReceivedAfter(before))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if _, ours := owner[ev.ObjectRef.Namespace]; ours {
			t.Errorf("one replica after the shards wrote %s %s %s/%s: the shards' result was not what it writes", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name)
		}
	}
}

// waitSliceEndpoints waits until the Service's EndpointSlices (the endpointslice
// controller's) hold n endpoints together.
func waitSliceEndpoints(t *testing.T, c kubernetes.Interface, ns, svc string, n int) {
	t.Helper()
	got := -1
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
			LabelSelector: discovery.LabelServiceName + "=" + svc + "," + discovery.LabelManagedBy + "=" + endpointslice.ManagedBy,
		})
		if err != nil {
			return false, nil
		}
		got = 0
		for _, s := range list.Items {
			got += len(s.Endpoints)
		}
		return got == n, nil
	})
	if err != nil {
		t.Fatalf("EndpointSlices of %s/%s hold %d endpoints, want %d", ns, svc, got, n)
	}
}
