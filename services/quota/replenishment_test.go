package quota

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

func TestReplenishOnlyQuotasTrackingTheResourceInItsNamespace(t *testing.T) {
	f := newFixture(t,
		quotaObj("ns", "pods", rl("pods", "10")),
		quotaObj("ns", "cpu", rl("requests.cpu", "10")),
		quotaObj("ns", "maps", rl("configmaps", "10")),
		quotaObj("other", "pods", rl("pods", "10")),
	)
	f.drain()
	h := f.c.replenishmentHandler(podsResource)
	running := namedPod("ns", "p", containers(container("c", rl("cpu", "1"), nil)))

	h.OnDelete(running)
	prio, prim := f.drain()
	if strings.Join(prio, ",") != "ns/pods,ns/cpu" && strings.Join(prio, ",") != "ns/cpu,ns/pods" || len(prim) != 0 {
		t.Fatalf("delete queued priority=%v primary=%v, want ns/pods and ns/cpu in priority", prio, prim)
	}
	h.OnDelete(cacheTombstone(running))
	if prio, _ := f.drain(); len(prio) != 2 {
		t.Fatalf("tombstone queued %v", prio)
	}

	relabeled := running.DeepCopy()
	relabeled.Labels = map[string]string{"a": "b"}
	h.OnUpdate(running, relabeled)
	if prio, prim := f.drain(); len(prio)+len(prim) != 0 {
		t.Fatalf("a label change queued %v %v", prio, prim)
	}
	failed := running.DeepCopy()
	failed.Status.Phase = v1.PodFailed
	h.OnUpdate(running, failed)
	if prio, _ := f.drain(); len(prio) != 2 {
		t.Fatalf("turning Failed queued %v", prio)
	}
	// A creation is counted again once, after chargeRecheck, in the primary queue (admission
	// charged it; see TestCreateHealsAnUnderCount); not an object of the informer's first list.
	f.c.chargeRecheck = 0
	h.OnAdd(running, true)
	if prio, prim := f.drain(); len(prio)+len(prim) != 0 {
		t.Fatalf("an object of the first list queued %v %v", prio, prim)
	}
	h.OnAdd(running, false)
	h.OnAdd(namedPod("ns", "p2"), false)
	prio, prim = f.drain()
	if len(prio) != 0 || strings.Join(prim, ",") != "ns/pods,ns/cpu" && strings.Join(prim, ",") != "ns/cpu,ns/pods" {
		t.Fatalf("creates queued priority=%v primary=%v, want ns/pods and ns/cpu once each in primary", prio, prim)
	}
}

// TestCreateHealsAnUnderCount: a sync that read the quota after admission charged a Pod but
// the Pods' cache before the Pod arrived writes one Pod too few (here the Pod is created only
// after that sync). The Pod's creation event must bring a sync that counts it; without one the
// quota stays under-counted until the full recalculation, and admission lets one Pod too many in.
func TestCreateHealsAnUnderCount(t *testing.T) {
	charged := quotaObj("ns", "q", rl("pods", "10"))
	charged.Status = v1.ResourceQuotaStatus{Hard: rl("pods", "10"), Used: rl("pods", "3")}
	f := newFixture(t, charged, namedPod("ns", "a"), namedPod("ns", "b"))
	f.c.chargeRecheck = 0
	if err := f.sync("ns/q"); err != nil {
		t.Fatal(err)
	}
	if got := f.stored("ns", "q").Status.Used[v1.ResourcePods]; got.Value() != 2 {
		t.Fatalf("the stale sync wrote pods=%s, want 2", got.String())
	}
	f.catchUp("ns", "q")
	f.drain()

	if _, err := f.client.CoreV1().Pods("ns").Create(f.ctx, namedPod("ns", "c"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var queued []string
	if err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, prim := f.drain()
		queued = append(queued, prim...)
		return len(queued) > 0, nil
	}); err != nil {
		t.Fatal("the Pod's creation queued no sync of its namespace's quota: the under-count stays")
	}
	for _, k := range queued {
		if err := f.c.syncQuota(f.ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.stored("ns", "q").Status.Used[v1.ResourcePods]; got.Value() != 3 {
		t.Fatalf("after the Pod's creation event pods=%s, want 3", got.String())
	}
}

func cacheTombstone(obj any) any {
	return cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: obj}
}
