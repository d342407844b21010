package quota

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
)

// staleness remembers, per quota key, since when its usage has been waiting to be counted
// in full: the time of its last sync that counted every resource type and published the
// result, or, until one has, the time this controller first synced it (what happened
// before this term of leadership is not known, so the age shown is a lower bound).
//
// It is exported per quota as kcm_split_quota_usage_staleness_seconds{namespace,name}: one
// series per quota that exists, dropped when the quota is deleted, so the series are as
// many as the quotas (a few per namespace), not more.
type staleness struct {
	desc *prometheus.Desc
	now  func() time.Time

	mu    sync.Mutex
	since map[string]time.Time
}

func newStaleness(now func() time.Time) *staleness {
	return &staleness{
		desc: prometheus.NewDesc("kcm_split_quota_usage_staleness_seconds",
			"Seconds since the quota's usage was last counted in full (every resource type it tracks) and published; "+
				"until then, since this controller first synced it. Grows while a type cannot be counted; "+
				"a healthy quota stays below the full recalculation period.",
			[]string{"namespace", "name"}, nil),
		now:   now,
		since: map[string]time.Time{},
	}
}

// seen starts the clock of a quota this controller had not synced before.
func (s *staleness) seen(qkey string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.since[qkey]; !ok {
		s.since[qkey] = at
	}
}

// counted restarts the clock: the quota's usage was counted in full and is published.
func (s *staleness) counted(qkey string, at time.Time) {
	s.mu.Lock()
	s.since[qkey] = at
	s.mu.Unlock()
}

// forget drops the series of a quota that is gone.
func (s *staleness) forget(qkey string) {
	s.mu.Lock()
	delete(s.since, qkey)
	s.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (s *staleness) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector: the ages are computed at scrape time, so the
// gauge grows between syncs without anything updating it.
func (s *staleness) Collect(ch chan<- prometheus.Metric) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for qkey, since := range s.since {
		ns, name, err := cache.SplitMetaNamespaceKey(qkey)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, max(now.Sub(since), 0).Seconds(), ns, name)
	}
}
