package quota

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// staleness remembers, per quota key, since when its usage has been waiting to be counted
// in full: the time of its last sync that counted every resource type and published the
// result, or, until one has, the time this controller first synced it (what happened
// before this term of leadership is not known, so the age shown is a lower bound), unless
// the previous holder kept the clock of a quota neither could count (store.go).
//
// It is exported per quota as kcm_split_quota_usage_staleness_seconds{namespace,name}: one
// series per quota that exists, dropped when the quota is deleted, so the series are as
// many as the quotas (a few per namespace), not more.
type staleness struct {
	desc *prometheus.Desc
	now  func() time.Time
	// changed is signalled when the set of quotas not counted in full, or one's clock,
	// changes (store.go writes it out).
	changed chan struct{}

	mu    sync.Mutex
	since map[string]time.Time
	// sighted: the quota's clock started at this term's first sight of it, not at a count
	// (a lower bound, which a kept clock may move back).
	sighted map[string]bool
	// partial holds the quotas whose latest sync could not count every type, by UID: their
	// clocks are what a next holder is given (store.go).
	partial map[string]types.UID
	// kept holds the clocks a previous holder kept that have not been matched yet (taken
	// when this term's own sync also cannot count the quota, dropped when it can), and
	// keptAt when they were read: they are passed on for keptCarry at most.
	kept   map[string]keptClock
	keptAt time.Time
}

func newStaleness(now func() time.Time) *staleness {
	return &staleness{
		desc: prometheus.NewDesc("kcm_split_quota_usage_staleness_seconds",
			"Seconds since the quota's usage was last counted in full (every resource type it tracks) and published; "+
				"until then, since this controller first synced it. Grows while a type cannot be counted; "+
				"a healthy quota stays below the full recalculation period.",
			[]string{"namespace", "name"}, nil),
		now:     now,
		changed: make(chan struct{}, 1),
		since:   map[string]time.Time{},
		sighted: map[string]bool{},
		partial: map[string]types.UID{},
		kept:    map[string]keptClock{},
	}
}

// seen starts the clock of a quota this controller had not synced before.
func (s *staleness) seen(qkey string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.since[qkey]; !ok {
		s.since[qkey] = at
		s.sighted[qkey] = true
	}
}

// counted restarts the clock: the quota's usage was counted in full and is published. A
// clock a previous holder kept for it is dropped: this holder's count wins.
func (s *staleness) counted(qkey string, at time.Time) {
	s.mu.Lock()
	s.since[qkey] = at
	delete(s.sighted, qkey)
	_, wasPartial := s.partial[qkey]
	_, wasKept := s.kept[qkey]
	delete(s.partial, qkey)
	delete(s.kept, qkey)
	s.mu.Unlock()
	if wasPartial || wasKept {
		s.signal()
	}
}

// uncounted records that the sync of quota qkey (uid) at now could not count every type its
// usage needs: its clock goes on, and is given to a next holder. When this term's clock of
// it only started at its first sight, a clock a previous holder kept for the same quota is
// taken (consistent: neither could count it), if earlier.
func (s *staleness) uncounted(qkey string, uid types.UID, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.partial[qkey] != uid
	s.partial[qkey] = uid
	if k, ok := s.kept[qkey]; ok {
		delete(s.kept, qkey)
		if since, tracked := s.since[qkey]; k.UID == uid && tracked && s.sighted[qkey] && k.Since.Before(since) && !k.Since.After(now) {
			s.since[qkey] = k.Since
			delete(s.sighted, qkey)
			changed = true
		}
	}
	if changed {
		s.signal()
	}
}

// forget drops the series of a quota that is gone.
func (s *staleness) forget(qkey string) {
	s.mu.Lock()
	delete(s.since, qkey)
	delete(s.sighted, qkey)
	_, wasPartial := s.partial[qkey]
	delete(s.partial, qkey)
	delete(s.kept, qkey)
	s.mu.Unlock()
	if wasPartial {
		s.signal()
	}
}

func (s *staleness) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
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
