package endpoints

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

func TestPodChange(t *testing.T) {
	base := newPod("a", "10.1.0.1", true)
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
		{name: "deletion", mutate: func(p *v1.Pod) { p.DeletionTimestamp = &testCreated }, wantContent: true},
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
		a.DeletionTimestamp, b.DeletionTimestamp = testCreated.DeepCopy(), testCreated.DeepCopy()
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

func TestPodHandlers(t *testing.T) {
	services := []*v1.Service{
		newService("web"),
		newService("db", func(s *v1.Service) { s.Spec.Selector = map[string]string{"app": "db"} }),
		newService("canary", func(s *v1.Service) { s.Spec.Selector = map[string]string{"app": "web", "track": "canary"} }),
		newService("all", func(s *v1.Service) { s.Spec.Selector = map[string]string{} }),
		newService("manual", func(s *v1.Service) { s.Spec.Selector = nil }),
		newService("alias", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeExternalName }),
		newService("elsewhere", func(s *v1.Service) { s.Namespace = "other" }),
	}
	bump := func(p *v1.Pod) { p.ResourceVersion = "2" }
	web := newPod("a", "10.1.0.1", true)

	for _, tc := range []struct {
		name string
		fire func(c *Controller)
		want []string
	}{
		{name: "add", fire: func(c *Controller) { c.onPodAdd(web) }, want: []string{"ns/all", "ns/web"}},
		{name: "delete", fire: func(c *Controller) { c.onPodDelete(web) }, want: []string{"ns/all", "ns/web"}},
		{
			name: "delete seen as a tombstone",
			fire: func(c *Controller) { c.onPodDelete(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: web}) },
			want: []string{"ns/all", "ns/web"},
		},
		{name: "resync", fire: func(c *Controller) { c.onPodUpdate(web, web.DeepCopy()) }},
		{
			name: "irrelevant update",
			fire: func(c *Controller) {
				c.onPodUpdate(web, newPod("a", "10.1.0.1", true, bump, func(p *v1.Pod) { p.Annotations = map[string]string{"x": "y"} }))
			},
		},
		{
			name: "readiness",
			fire: func(c *Controller) { c.onPodUpdate(web, newPod("a", "10.1.0.1", false, bump)) },
			want: []string{"ns/all", "ns/web"},
		},
		{
			name: "moved to another service: old and new",
			fire: func(c *Controller) {
				c.onPodUpdate(web, newPod("a", "10.1.0.1", true, bump, func(p *v1.Pod) { p.Labels = map[string]string{"app": "db"} }))
			},
			want: []string{"ns/db", "ns/web"},
		},
		{
			name: "label added: only the service that gained it",
			fire: func(c *Controller) {
				c.onPodUpdate(web, newPod("a", "10.1.0.1", true, bump, func(p *v1.Pod) { p.Labels["track"] = "canary" }))
			},
			want: []string{"ns/canary"},
		},
		{
			name: "label added while becoming unready: every service concerned",
			fire: func(c *Controller) {
				c.onPodUpdate(web, newPod("a", "10.1.0.1", false, bump, func(p *v1.Pod) { p.Labels["track"] = "canary" }))
			},
			want: []string{"ns/all", "ns/canary", "ns/web"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, DefaultOptions())
			for _, s := range services {
				f.cache(s)
			}
			tc.fire(f.c)
			if diff := cmp.Diff(tc.want, f.queued()); diff != "" {
				t.Errorf("queued (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBatchPeriodDelaysPodTriggeredSyncsOnly(t *testing.T) {
	opts := DefaultOptions()
	opts.BatchPeriod = 200 * time.Millisecond
	f := newFixture(t, opts)
	svc := newService("web")
	f.cache(svc)

	f.c.onPodAdd(newPod("a", "10.1.0.1", true))
	f.c.onPodAdd(newPod("b", "10.1.0.2", true))
	if n := f.c.queue.Len(); n != 0 {
		t.Fatalf("pod changes queued at once (%d keys), want them delayed", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.c.queue.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if diff := cmp.Diff([]string{"ns/web"}, f.queued()); diff != "" {
		t.Errorf("after the batch period, queued (-want +got):\n%s", diff)
	}

	f.c.enqueue(svc)
	if diff := cmp.Diff([]string{"ns/web"}, f.queued()); diff != "" {
		t.Errorf("service change not queued at once (-want +got):\n%s", diff)
	}
}

func TestServiceAndEndpointsHandlers(t *testing.T) {
	f := newFixture(t, DefaultOptions())
	f.c.enqueue(newService("s"))
	f.c.enqueue(cache.DeletedFinalStateUnknown{Key: "ns/t", Obj: newService("t")})
	f.c.enqueue(&v1.Endpoints{ObjectMeta: newService("u").ObjectMeta})
	if diff := cmp.Diff([]string{"ns/s", "ns/t", "ns/u"}, f.queued()); diff != "" {
		t.Errorf("queued (-want +got):\n%s", diff)
	}
}
