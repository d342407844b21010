package sharding

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// objectCount counts the objects of one informer's cache by namespace, from its events: an
// add counts, a delete uncounts (a namespace never changes), so a scrape costs a pass over the
// namespaces, not over the objects.
type objectCount struct {
	mu    sync.Mutex
	total int
	byNS  map[string]int
}

func (c *objectCount) add(obj any, delta int) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ns := m.GetNamespace()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += delta
	if n := c.byNS[ns] + delta; n > 0 {
		c.byNS[ns] = n
	} else {
		delete(c.byNS, ns)
	}
}

// largest is the namespace holding the most objects ("" when none) and its count; ties go to
// the first name in order, so that the series does not flap between equals.
func (c *objectCount) largest() (string, int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name, most := "", 0
	for ns, n := range c.byNS {
		if n > most || (n == most && ns < name) {
			name, most = ns, n
		}
	}
	return name, most, c.total
}

// countObjects has v count the objects inf caches as resource, replacing the count of an
// earlier informer of that resource (a new term builds new informers).
func (v *View) countObjects(resource string, inf cache.SharedIndexInformer) {
	c := &objectCount{byNS: map[string]int{}}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.add(obj, 1) },
		DeleteFunc: func(obj any) { c.add(obj, -1) },
	})
	v.mu.Lock()
	v.counts[resource] = c
	v.mu.Unlock()
}

// objectsCollector exports each resource's count of the view: kcm_split_shard_objects and the
// largest namespace, kcm_split_shard_largest_namespace_objects.
type objectsCollector struct {
	v              *View
	objects, large *prometheus.Desc
}

func newObjectsCollector(v *View) *objectsCollector {
	labels := prometheus.Labels{"binary": v.binary, "shard": strconv.Itoa(v.shard.Index), "shards": strconv.Itoa(v.shard.Count)}
	return &objectsCollector{
		v: v,
		objects: prometheus.NewDesc("kcm_split_shard_objects",
			"Objects of one resource in this shard's cache (its namespaces only), while it leads. Summed over a binary's shards, the cluster's; max over mean, how even the layout is (1 is even).",
			[]string{"resource"}, labels),
		large: prometheus.NewDesc("kcm_split_shard_largest_namespace_objects",
			"Objects of one resource in the largest namespace of this shard's cache, named. A namespace holding more than 1/N of a binary's objects (sum of kcm_split_shard_objects over its N shards) makes its shard hot whatever the layout: no hash splits a namespace.",
			[]string{"resource", "namespace"}, labels),
	}
}

func (o *objectsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- o.objects
	ch <- o.large
}

func (o *objectsCollector) Collect(ch chan<- prometheus.Metric) {
	o.v.mu.Lock()
	counts := make(map[string]*objectCount, len(o.v.counts))
	for r, c := range o.v.counts {
		counts[r] = c
	}
	o.v.mu.Unlock()
	for resource, c := range counts {
		ns, most, total := c.largest()
		ch <- prometheus.MustNewConstMetric(o.objects, prometheus.GaugeValue, float64(total), resource)
		if ns != "" {
			ch <- prometheus.MustNewConstMetric(o.large, prometheus.GaugeValue, float64(most), resource, ns)
		}
	}
}
