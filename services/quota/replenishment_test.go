package quota

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
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
	// Creations are charged by admission: nothing to do.
	h.OnAdd(running, false)
	if prio, prim := f.drain(); len(prio)+len(prim) != 0 {
		t.Fatalf("a create queued %v %v", prio, prim)
	}
}

func cacheTombstone(obj any) any {
	return cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: obj}
}
