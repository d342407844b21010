package podservices

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/projection"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
)

func TestPodChange(t *testing.T) {
	base := testobj.Pod("a", "10.1.0.1", true)
	for _, tc := range []struct {
		name                      string
		mutate                    func(*v1.Pod)
		wantContent, wantSelected bool
	}{
		{name: "annotation only", mutate: func(p *v1.Pod) { p.Annotations = map[string]string{"x": "y"} }},
		{name: "container status only", mutate: func(p *v1.Pod) {
			p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "c", RestartCount: 3}}
		}},
		{name: "other condition", mutate: func(p *v1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionTrue})
		}},
		{name: "readiness", mutate: func(p *v1.Pod) { p.Status.Conditions[0].Status = v1.ConditionFalse }, wantContent: true},
		{name: "deletion", mutate: func(p *v1.Pod) { p.DeletionTimestamp = &testobj.Created }, wantContent: true},
		{name: "terminal", mutate: func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded }, wantContent: true},
		{name: "pod IPs", mutate: func(p *v1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, v1.PodIP{IP: "fd00::1"}) }, wantContent: true},
		{name: "pod IP", mutate: func(p *v1.Pod) { p.Status.PodIP = "10.1.0.9" }, wantContent: true},
		{name: "node", mutate: func(p *v1.Pod) { p.Spec.NodeName = "node-2" }, wantContent: true},
		{name: "hostname", mutate: func(p *v1.Pod) { p.Spec.Hostname = "h" }, wantContent: true},
		{name: "labels", mutate: func(p *v1.Pod) { p.Labels = map[string]string{"app": "db"} }, wantSelected: true},
		{name: "labels and readiness", mutate: func(p *v1.Pod) {
			p.Labels = nil
			p.Status.Conditions[0].Status = v1.ConditionFalse
		}, wantContent: true, wantSelected: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tc.mutate(cur)
			content, selected := podChange(base, cur)
			if content != tc.wantContent || selected != tc.wantSelected {
				t.Errorf("podChange = %v, %v; want %v, %v", content, selected, tc.wantContent, tc.wantSelected)
			}
		})
	}
	t.Run("same deletion time in two copies is no change", func(t *testing.T) {
		a, b := base.DeepCopy(), base.DeepCopy()
		a.DeletionTimestamp, b.DeletionTimestamp = testobj.Created.DeepCopy(), testobj.Created.DeepCopy()
		if content, _ := podChange(a, b); content {
			t.Error("equal deletion timestamps reported as a change")
		}
	})
}

func TestAffectedServices(t *testing.T) {
	set := func(keys ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, k := range keys {
			m[k] = struct{}{}
		}
		return m
	}
	before, after := set("kept", "lost"), set("kept", "gained")
	if diff := cmp.Diff(set("lost", "gained"), affectedServices(before, after, false)); diff != "" {
		t.Errorf("labels only (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(set("kept", "lost", "gained"), affectedServices(before, after, true)); diff != "" {
		t.Errorf("labels and content (-want +got):\n%s", diff)
	}
}

// Pod update filtering sees the same changes in projected Pods as in full ones: the cache
// holds only projections.
func TestPodChangeOfProjectedPods(t *testing.T) {
	full := testobj.RichPods()
	projected := testobj.Projected(t, full, projection.New().Transform)
	for i := range full {
		for j := range full {
			fc, fl := podChange(full[i], full[j])
			pc, pl := podChange(projected[i], projected[j])
			if fc != pc || fl != pl {
				t.Fatalf("podChange(%s,%s): full=(%v,%v) projected=(%v,%v)", full[i].Name, full[j].Name, fc, fl, pc, pl)
			}
		}
	}
}
