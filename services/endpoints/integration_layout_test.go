package endpointscontroller_test

import (
	"context"
	"fmt"
	"strings"
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
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestLayoutChangeTwoToFour(t *testing.T) {
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
	old := env.StartShards(t, controller, 2, "old", leases)
	for _, ns := range all {
		waitEndpoints(t, c, ns, "web", "one ready address", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 1 })
	}

	news := make([]*testenv.Controller, 4)
	for i := range news {
		news[i] = env.Start(t, controller, fmt.Sprintf("new-%d", i), "--shards=4", fmt.Sprintf("--shard-index=%d", i), "--leader-elect-resource-namespace="+leases)
	}
	// Every new shard has seen both old Leases held, and holds no Lease of its own.
	blocking := func(i int) string {
		return fmt.Sprintf(`kcm_split_shard_layout_blocking_leases{binary=%q,shard="%d",shards="4"}`, endpointscontroller.ControllerID, i)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for i, n := range news {
			if n.Metric(blocking(i)) != 2 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the new shards never saw the 2 old Leases held: %v", err)
	}
	// Churn while both layouts run: the old layout serves it.
	for k, ns := range all {
		createPod(t, c, makePod(ns, "web-1", fmt.Sprintf("10.9.%d.2", k), sel))
	}
	for _, ns := range all {
		waitEndpoints(t, c, ns, "web", "two ready addresses", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 2 })
	}
	for i, n := range news {
		if n.IsLeader(lease(sharding.Shard{Index: i, Count: 4})) {
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
		n.WaitLeadingAndSynced(lease(sharding.Shard{Index: i, Count: 4}), testenv.LeadTimeout)
	}
	t.Logf("4 new shards leading and synced %s after the old layout was stopped (its stop took %s)",
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
		return ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Namespace == leases && strings.Contains(ev.ObjectRef.Name, "-shard-") && strings.HasSuffix(ev.ObjectRef.Name, "-of-2")
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
		series := fmt.Sprintf(`kcm_split_leader_fenced_writes_total{name=%q,reason="other_shard_layout"}`, lease(sharding.Shard{Index: i, Count: 4}))
		if v := n.Metric(series); v != 0 {
			t.Errorf("new shard %d: %s = %v: it tried to write while the old layout held a Lease", i, series, v)
		}
	}
	if wrote == 0 {
		t.Fatal("the new layout wrote nothing: the churn after the switch was not served by it")
	}
}
