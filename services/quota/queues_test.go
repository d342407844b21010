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
	// A status update that gives usage back (ours after a deletion) needs no sync.
	f.c.chargeRecheck = 0
	lowered := synced.DeepCopy()
	lowered.Status.Used = rl("pods", "0")
	synced.Status.Used = rl("pods", "1")
	f.c.onQuotaUpdate(synced, lowered)
	if prio, prim := f.drain(); len(prio)+len(prim) != 0 {
		t.Fatalf("a status update lowering usage queued %v %v", prio, prim)
	}
	// One that raises it (admission charging a create) is synced again, once, after
	// chargeRecheck: a replenishment sync may have read the quota before the charge.
	charged := lowered.DeepCopy()
	charged.Status.Used = rl("pods", "1")
	f.c.onQuotaUpdate(lowered, charged)
	f.c.onQuotaUpdate(lowered, charged)
	if prio, prim := f.drain(); len(prio) != 0 || strings.Join(prim, ",") != "ns/q" {
		t.Fatalf("a status update raising usage queued priority=%v primary=%v, want ns/q once in primary", prio, prim)
	}
	edited := synced.DeepCopy()
	edited.Spec.Hard = rl("pods", "2")
	f.c.onQuotaUpdate(synced, edited)
	if prio, _ := f.drain(); strings.Join(prio, ",") != "ns/q" {
		t.Fatalf("a spec.hard edit queued %v, want ns/q in priority", prio)
	}
}
