package endpoints

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
)

func TestPodHandlers(t *testing.T) {
	services := []*v1.Service{
		testobj.Service("web"),
		testobj.Service("db", func(s *v1.Service) { s.Spec.Selector = map[string]string{"app": "db"} }),
		testobj.Service("canary", func(s *v1.Service) { s.Spec.Selector = map[string]string{"app": "web", "track": "canary"} }),
		testobj.Service("all", func(s *v1.Service) { s.Spec.Selector = map[string]string{} }),
		testobj.Service("manual", func(s *v1.Service) { s.Spec.Selector = nil }),
		testobj.Service("alias", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeExternalName }),
		testobj.Service("elsewhere", func(s *v1.Service) { s.Namespace = "other" }),
	}
	bump := func(p *v1.Pod) { p.ResourceVersion = "2" }
	web := testobj.Pod("a", "10.1.0.1", true)

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
				c.onPodUpdate(web, testobj.Pod("a", "10.1.0.1", true, bump, func(p *v1.Pod) { p.Annotations = map[string]string{"x": "y"} }))
			},
		},
		{
			name: "readiness",
			fire: func(c *Controller) { c.onPodUpdate(web, testobj.Pod("a", "10.1.0.1", false, bump)) },
			want: []string{"ns/all", "ns/web"},
		},
		{
			name: "moved to another service: old and new",
			fire: func(c *Controller) {
				c.onPodUpdate(web, testobj.Pod("a", "10.1.0.1", true, bump, func(p *v1.Pod) { p.Labels = map[string]string{"app": "db"} }))
			},
			want: []string{"ns/db", "ns/web"},
		},
		{
			name: "label added: only the service that gained it",
			fire: func(c *Controller) {
				c.onPodUpdate(web, testobj.Pod("a", "10.1.0.1", true, bump, func(p *v1.Pod) { p.Labels["track"] = "canary" }))
			},
			want: []string{"ns/canary"},
		},
		{
			name: "label added while becoming unready: every service concerned",
			fire: func(c *Controller) {
				c.onPodUpdate(web, testobj.Pod("a", "10.1.0.1", false, bump, func(p *v1.Pod) { p.Labels["track"] = "canary" }))
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
	svc := testobj.Service("web")
	f.cache(svc)

	f.c.onPodAdd(testobj.Pod("a", "10.1.0.1", true))
	f.c.onPodAdd(testobj.Pod("b", "10.1.0.2", true))
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
	f.c.enqueue(testobj.Service("s"))
	f.c.enqueue(cache.DeletedFinalStateUnknown{Key: "ns/t", Obj: testobj.Service("t")})
	f.c.enqueue(&v1.Endpoints{ObjectMeta: testobj.Service("u").ObjectMeta})
	if diff := cmp.Diff([]string{"ns/s", "ns/t", "ns/u"}, f.queued()); diff != "" {
		t.Errorf("queued (-want +got):\n%s", diff)
	}
}
