package quota

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestInformersOfUntrackedTypesStop(t *testing.T) {
	f := newFixture(t, quotaObj("ns", "q", rl("pods", "5", "services", "5")))
	f.c.startMonitors(f.ctx)
	running := func() []schema.GroupResource {
		f.c.monitors.mu.Lock()
		defer f.c.monitors.mu.Unlock()
		var out []schema.GroupResource
		for gr := range f.c.monitors.byGR {
			out = append(out, gr)
		}
		return out
	}
	if got := running(); len(got) != 2 {
		t.Fatalf("running %v, want pods and services", got)
	}
	rq := f.stored("ns", "q")
	rq.Spec.Hard = rl("pods", "5")
	if _, err := f.client.CoreV1().ResourceQuotas("ns").Update(f.ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.catchUp("ns", "q")
	f.c.stopUnneededMonitors(f.ctx)
	if got := running(); len(got) != 1 || got[0] != podsResource {
		t.Fatalf("running %v, want only pods", got)
	}
}
