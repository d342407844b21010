package quota_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/quota"
	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

func TestTwoShardsGateOn(t *testing.T) {
	testenv.Require(t, env)
	start := time.Now()
	e, err := testenv.Start(testenv.Options{ExtraAPIServerArgs: []string{"--feature-gates=ShardedListAndWatch=true"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	t.Logf("control plane with ShardedListAndWatch=true ready in %s", time.Since(start).Round(time.Millisecond))
	twoShards(t, e, sharding.ModeServer)
}

func TestTwoShardsGateOff(t *testing.T) {
	testenv.Require(t, env)
	twoShards(t, env, sharding.ModeClient)
}

// twoShards: two shards of quota-controller side by side count the usage of their own
// namespaces' quotas, typed (Pods) and metadata-only (ConfigMaps) types alike, give usage
// back on a delete, and write only the quotas of their own namespaces.
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func twoShards(t *testing.T, e *testenv.Env, wantMode string) {
	c := e.Client(t)
	ctx := context.Background()
	leases := e.Namespace(t)
	owned := map[int][]string{}
	for range 40 {
		ns := e.Namespace(t)
		i := 0
		if !(sharding.Shard{Index: 0, Count: 2}).Owns(ns) {
			i = 1
		}
		owned[i] = append(owned[i], ns)
		if len(owned[0]) >= 2 && len(owned[1]) >= 2 {
			break
		}
	}
	if len(owned[0]) < 2 || len(owned[1]) < 2 {
		t.Fatalf("40 namespaces did not give each shard two: %v", owned)
	}
	all := slices.Concat(owned[0], owned[1])
	// The objects exist before their quota: admission charged nothing, every figure below
	// is the controller's count.
	for k, ns := range all {
		for i := range 2 {
			if _, err := c.CoreV1().Pods(ns).Create(ctx, computePod(ns, fmt.Sprintf("p%d", i), "100m", "256Mi"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range k%3 + 1 {
			if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm%d", i)}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		createQuota(t, c, ns, "q", corev1.ResourceList{corev1.ResourcePods: q("10"), corev1.ResourceRequestsMemory: q("10Gi"), corev1.ResourceConfigMaps: q("10")})
	}

	shards := e.StartShards(t, controller, 2, sharding.HashFNV, "shard", leases)
	for k, ns := range all {
		// A namespace holds the kube-root-ca.crt ConfigMap too, once published; none here
		// (no controller-manager publishes it), so the count is ours alone.
		waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{"pods": "2", "requests.memory": "512Mi", "configmaps": fmt.Sprint(k%3 + 1)})
	}
	// Replenishment: only the controller gives usage back.
	for _, ns := range all {
		if err := c.CoreV1().Pods(ns).Delete(ctx, "p0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	for k, ns := range all {
		waitUsed(t, c, ns, "q", map[corev1.ResourceName]string{"pods": "1", "requests.memory": "256Mi", "configmaps": fmt.Sprint(k%3 + 1)})
	}

	for i, s := range shards {
		// Every type a quota here counts, typed and metadata-only, and the quotas: the
		// resources and modes as the shard reports them (printed, one line each).
		for _, r := range []string{"resourcequotas", "pods", "configmaps"} {
			mode := ""
			for _, m := range []string{sharding.ModeServer, sharding.ModeClient, sharding.ModeUnknown} {
				if s.Metric(fmt.Sprintf(`kcm_split_shard_info{binary=%q,mode=%q,resource=%q,shard="%d",shards="2"}`, quota.ControllerID, m, r, i)) == 1 {
					mode = m
				}
			}
			t.Logf("shard %d: %s filtered by the %s", i, r, mode)
			// ConfigMaps are metadata-only: their mode comes from a probe of full objects,
			// since a PartialObjectMetadataList loses ShardInfo.
			if mode != wantMode {
				t.Errorf("shard %d: %s filtered by %q, want %q", i, r, mode, wantMode)
			}
		}
	}
	evs, err := e.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "resourcequotas"))
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	for i, s := range shards {
		for _, ns := range owned[i] {
			owner[ns] = s.Identity()
		}
	}
	for _, ev := range evs {
		if want, ours := owner[ev.ObjectRef.Namespace]; ours && ev.Identity() != want {
			t.Errorf("quota %s/%s written by %s, not by its shard %s", ev.ObjectRef.Namespace, ev.ObjectRef.Name, ev.Identity(), want)
		}
	}
}
