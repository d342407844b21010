package endpointscontroller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	endpointscontroller "github.com/kcm-split/kcm-split/services/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestLayoutChangeTwoToFour: with 2 shards running, 4 shards of a new layout start and wait
// (no Lease taken, nothing written) until the 2 are stopped; they then take over, and no
// write of theirs reached the apiserver before the old layout's last Lease was released.
func TestLayoutChangeTwoToFour(t *testing.T) {
	layoutChange(t, sharding.Shard{Count: 2, Hash: sharding.HashFNV}, sharding.Shard{Count: 4, Hash: sharding.HashFNV})
}

// TestLayoutChangeHash: the same at 2 shards from the KEP's hash to the mixed one. The two
// layouts' shards have Leases of different names (nothing to contend for), and a namespace can
// be in shard 0 of one and shard 1 of the other: only the layout fence keeps the new shards
// from writing while the old ones run.
func TestLayoutChangeHash(t *testing.T) {
	layoutChange(t, sharding.Shard{Count: 2, Hash: sharding.HashFNV}, sharding.Shard{Count: 2, Hash: sharding.HashMixed})
}

// layoutChange runs from.Count shards of from.Hash, then to.Count of to.Hash beside them, and
// checks the new layout waits for the old one's Leases before it writes, then serves alone.
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func layoutChange(t *testing.T, from, to sharding.Shard) {
	testenv.Require(t, env)
	c := env.Client(t)
	leases := env.Namespace(t)
	owned := shardNamespaces(t, env, 4)
	var all []string
	for i := range 4 {
		all = append(all, owned[i]...)
	}
	sel := map[string]string{"app": "web"}
	for k, ns := range all {
		createService(t, c, makeService(ns, "web", sel))
		createPod(t, c, makePod(ns, "web-0", fmt.Sprintf("10.9.%d.1", k), sel))
	}
	lease := func(s sharding.Shard) string { return s.LeaseName(endpointscontroller.ControllerID) }
	shard := func(layout sharding.Shard, i int) sharding.Shard { layout.Index = i; return layout }
	old := env.StartShards(t, controller, from.Count, from.Hash, "old", leases)
	oldLeases := map[string]bool{}
	for i := range from.Count {
		oldLeases[lease(shard(from, i))] = true
	}
	for _, ns := range all {
		waitEndpoints(t, c, ns, "web", "one ready address", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 1 })
	}

	news := make([]*testenv.Controller, to.Count)
	for i := range news {
		news[i] = env.Start(t, controller, fmt.Sprintf("new-%d", i), fmt.Sprintf("--shards=%d", to.Count), fmt.Sprintf("--shard-index=%d", i),
			"--shard-hash="+string(to.Hash.Name()), "--leader-elect-resource-namespace="+leases)
	}
	// Every new shard has seen every old Lease held, and holds no Lease of its own.
	blocking := func(i int) string {
		return fmt.Sprintf(`kcm_split_shard_layout_blocking_leases{binary=%q,shard="%d",shards="%d"}`, endpointscontroller.ControllerID, i, to.Count)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for i, n := range news {
			if n.Metric(blocking(i)) != float64(from.Count) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the new shards never saw the %d old Leases held: %v", from.Count, err)
	}
	// Churn while both layouts run: the old layout serves it.
	for k, ns := range all {
		createPod(t, c, makePod(ns, "web-1", fmt.Sprintf("10.9.%d.2", k), sel))
	}
	for _, ns := range all {
		waitEndpoints(t, c, ns, "web", "two ready addresses", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 2 })
	}
	for i, n := range news {
		if n.IsLeader(lease(shard(to, i))) {
			t.Fatalf("new shard %d took its Lease while the old layout held theirs", i)
		}
	}

	// Stop the old layout: each drains, then releases its Lease.
	stopping := time.Now()
	for _, o := range old {
		o.Stop(30 * time.Second)
	}
	stopped := time.Now()
	for i, n := range news {
		n.WaitLeadingAndSynced(lease(shard(to, i)), testenv.LeadTimeout)
	}
	t.Logf("new layout (%s) leading and synced %s after the old layout was stopped (its stop took %s)", to.Layout(),
		time.Since(stopped).Round(time.Millisecond), stopped.Sub(stopping).Round(time.Millisecond))
	// Churn after the switch: the new layout serves it.
	for k, ns := range all {
		createPod(t, c, makePod(ns, "web-2", fmt.Sprintf("10.9.%d.3", k), sel))
	}
	for _, ns := range all {
		waitEndpoints(t, c, ns, "web", "three ready addresses", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 3 })
	}

	// When the old layout's Leases were released: the last write of each, by its holder's
	// election client, as the audit log has it.
	var released time.Time
	leaseWrites, err := env.Writes(func(ev testenv.AuditEvent) bool {
		return ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Namespace == leases && oldLeases[ev.ObjectRef.Name]
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range leaseWrites {
		if ev.StageTimestamp.After(released) {
			released = ev.StageTimestamp
		}
	}
	if released.IsZero() {
		t.Fatal("no write of the old layout's Leases in the audit log")
	}
	wrote := 0
	for i, n := range news {
		evs, err := env.Writes(testenv.ByIdentity(n.Identity()))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			wrote++
			if !ev.RequestReceivedTimestamp.After(released) {
				t.Errorf("new shard %d wrote %s %s %s/%s at %s, before the old layout's last Lease release at %s",
					i, ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name, ev.RequestReceivedTimestamp, released)
			}
		}
		series := fmt.Sprintf(`kcm_split_leader_fenced_writes_total{name=%q,reason="other_shard_layout"}`, lease(shard(to, i)))
		if v := n.Metric(series); v != 0 {
			t.Errorf("new shard %d: %s = %v: it tried to write while the old layout held a Lease", i, series, v)
		}
	}
	if wrote == 0 {
		t.Fatal("the new layout wrote nothing: the churn after the switch was not served by it")
	}
}
