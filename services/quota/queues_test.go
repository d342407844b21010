package quota

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestQuotaHandlers(t *testing.T) {
	synced := quotaObj("ns", "q", rl("pods", "1"))
	synced.Status = v1.ResourceQuotaStatus{Hard: rl("pods", "1"), Used: rl("pods", "0")}
	f := newFixture(t, synced, quotaObj("ns", "new", rl("pods", "1")))
	prio, prim := f.drain()
	if strings.Join(prio, ",") != "ns/new" || strings.Join(prim, ",") != "ns/q" {
		t.Fatalf("initial adds: priority=%v primary=%v", prio, prim)
	}
	statusOnly := synced.DeepCopy()
	statusOnly.Status.Used = rl("pods", "1")
	f.c.onQuotaUpdate(synced, statusOnly)
	if prio, prim := f.drain(); len(prio)+len(prim) != 0 {
		t.Fatalf("a status update queued %v %v", prio, prim)
	}
	edited := synced.DeepCopy()
	edited.Spec.Hard = rl("pods", "2")
	f.c.onQuotaUpdate(synced, edited)
	if prio, _ := f.drain(); strings.Join(prio, ",") != "ns/q" {
		t.Fatalf("a spec.hard edit queued %v, want ns/q in priority", prio)
	}
}
