package namespace

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/leasestate"
)

// The memory of last good discoveries outlives the process: with
// --allow-deletion-with-unavailable-groups the Lease holder keeps it in a ConfigMap of its
// own beside its Lease, and the next holder starts from it. A ConfigMap rather than an
// annotation on the Lease: the Lease is rewritten by every renewal (every 2 s) and its
// elector, and a write of ours there would make renewals conflict. Only the holder writes it:
// the controller's client is fenced like its other writes, and every update is conditioned on
// the resourceVersion it last read or wrote.
const (
	// DiscoveryStoreSuffix names the ConfigMap: <Lease name>-discovery, in the Lease's
	// namespace.
	DiscoveryStoreSuffix = "-discovery"
	// DiscoveryStoreKey is the ConfigMap's one data key, JSON (storedMemory).
	DiscoveryStoreKey = "discovery.json"
	// storeStaleAfter: a stored memory whose writer last discovered longer ago than this (or
	// this far in the future: another clock) is not believed at all. The holder writes at
	// least every storeHeartbeat while it discovers (every discoveryRefreshPeriod), so a
	// memory this old was left by nobody who could still vouch for it.
	storeStaleAfter = 10 * time.Minute
	storeHeartbeat  = 2 * time.Minute
	// storeRetry is how soon a failed read or write of the store is tried again.
	storeRetry = 10 * time.Second
	// storeMaxGVs and storeMaxBytes bound the ConfigMap (1 MiB at most in the apiserver); a
	// cluster serves a few dozen group versions, each a few hundred bytes.
	storeMaxGVs   = 512
	storeMaxBytes = 256 << 10
)

// storedGV is one group version's last good discovery as stored.
type storedGV struct {
	// Served is when discovery last answered for it.
	Served time.Time `json:"served"`
	// Holders are the namespaced resources it served that can be listed or deleted; Others
	// the rest (cluster-scoped, or namespaced holding nothing, such as reviews).
	Holders []string `json:"holders,omitempty"`
	Others  []string `json:"others,omitempty"`
	// FailingSince is the writer's first failed discovery of it after Served, if any.
	FailingSince *time.Time `json:"failingSince,omitempty"`
}

// storedMemory is the ConfigMap's content.
type storedMemory struct {
	// Observed is when the writer's latest discovery was made: the memory is current as of it.
	Observed      time.Time           `json:"observed"`
	GroupVersions map[string]storedGV `json:"groupVersions"`
}

// snapshot is what the memory says of every group version the latest discovery reached or
// found failing and that answered at some point; a group version never seen answering has
// nothing to keep (it blocks, stored or not), and one the latest discovery does not know is
// gone from the cluster.
func (m *apiMemory) snapshot() storedMemory {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := storedMemory{Observed: m.observed, GroupVersions: map[string]storedGV{}}
	for gv, rec := range m.gvs {
		if rec.good.IsZero() || !rec.mentioned.Equal(m.observed) {
			continue
		}
		s := storedGV{Served: rec.good, Holders: slices.Clone(rec.holders), Others: slices.Clone(rec.others)}
		if !rec.failingSince.IsZero() {
			at := rec.failingSince
			s.FailingSince = &at
		}
		out.GroupVersions[gv.String()] = s
	}
	return out
}

// seed fills the memory from a stored one a previous holder wrote, checked against this
// process's own view: a group version this process saw answering keeps what it saw; one it
// has only seen failing takes the stored last good discovery, and fails since the earlier of
// the stored moment and its own first sight. Entries that do not parse are skipped (they
// stay unknown, and block). It returns how many entries were taken.
func (m *apiMemory) seed(s storedMemory) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for name, e := range s.GroupVersions {
		gv, err := schema.ParseGroupVersion(name)
		if err != nil || e.Served.IsZero() || e.Served.After(s.Observed) {
			continue
		}
		rec := m.gvs[gv]
		if rec != nil && !rec.good.IsZero() {
			continue // this process's own discovery wins
		}
		seeded := &gvRecord{good: e.Served, holders: slices.Clone(e.Holders), others: slices.Clone(e.Others)}
		if e.FailingSince != nil && !e.FailingSince.Before(e.Served) {
			seeded.failingSince = *e.FailingSince
		}
		if rec != nil {
			seeded.mentioned = rec.mentioned
			if !rec.failingSince.IsZero() && (seeded.failingSince.IsZero() || rec.failingSince.Before(seeded.failingSince)) {
				seeded.failingSince = rec.failingSince
			}
		}
		m.gvs[gv] = seeded
		n++
	}
	return n
}

// fresh reports whether a stored memory may be believed at now.
func (s storedMemory) fresh(now time.Time) bool {
	age := now.Sub(s.Observed)
	return !s.Observed.IsZero() && age <= storeStaleAfter && -age <= storeStaleAfter
}

// encode marshals s within the bounds: over them, the entries that hold objects go first
// (they block whether remembered or not), then the lists of what else was served, then
// entries by name from the end. It returns the JSON and how many entries were dropped.
func (s storedMemory) encode() ([]byte, int, error) {
	gvs := make(map[string]storedGV, len(s.GroupVersions))
	for k, v := range s.GroupVersions {
		gvs[k] = v
	}
	s.GroupVersions = gvs
	dropped := 0
	over := func() (bool, []byte, error) {
		b, err := json.Marshal(s)
		return len(s.GroupVersions) > storeMaxGVs || len(b) > storeMaxBytes, b, err
	}
	for step := 0; ; step++ {
		isOver, b, err := over()
		if err != nil || !isOver {
			return b, dropped, err
		}
		names := make([]string, 0, len(s.GroupVersions))
		for k := range s.GroupVersions {
			names = append(names, k)
		}
		slices.Sort(names)
		switch step {
		case 0:
			for _, k := range names {
				if len(s.GroupVersions[k].Holders) > 0 {
					delete(s.GroupVersions, k)
					dropped++
				}
			}
		case 1:
			for _, k := range names {
				e := s.GroupVersions[k]
				e.Others = nil
				s.GroupVersions[k] = e
			}
		default:
			// Over by entries alone: drop the last tenth, by name.
			cut := max(1, len(names)/10)
			for _, k := range names[len(names)-cut:] {
				delete(s.GroupVersions, k)
				dropped++
			}
		}
	}
}

// discoveryStore reads and writes the stored memory. Only the store loop uses it.
type discoveryStore struct {
	// kept is the ConfigMap (shared/leasestate): nothing is written before it is loaded this
	// term, so a holder that could not read it never overwrites what its predecessor kept.
	kept *leasestate.Store
	// written is the content of the last write, and when (its Observed).
	written  map[string]storedGV
	observed time.Time
}

// keepDiscoveryIn makes the controller keep its memory of last good discoveries in the
// ConfigMap name of cms, and start from what it holds. Call before Run.
func (c *Controller) keepDiscoveryIn(cms corev1client.ConfigMapInterface, name string) {
	kept, err := leasestate.New(cms, name, leasestate.Options{Key: DiscoveryStoreKey, MaxBytes: storeMaxBytes, ManagedBy: ControllerID})
	if err != nil {
		panic(err) // a constant key and a Lease name: a programming error
	}
	c.store = &discoveryStore{kept: kept}
}

// loadStore reads the store and seeds the memory from it when it is fresh. A read that
// fails leaves the store unloaded (tried again later); content that cannot be parsed or is
// stale seeds nothing. It reports whether the store is loaded.
func (c *Controller) loadStore(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	st := c.store
	name := st.kept.Name()
	data, found, err := st.kept.Load(ctx)
	switch {
	case err != nil:
		logger.Error(err, "Cannot read the discovery memory kept by a previous holder; unavailable APIs block until this process has seen them answer", "configMap", name)
		c.metrics.storeOps.WithLabelValues("read", "error").Inc()
		return false
	case !found:
		logger.Info("No discovery memory kept by a previous holder", "configMap", name)
		return true
	}
	c.metrics.storeOps.WithLabelValues("read", "ok").Inc()
	var stored storedMemory
	if err := json.Unmarshal(data, &stored); err != nil {
		logger.Error(err, "Discovery memory kept by a previous holder does not parse; not used", "configMap", name)
		return true
	}
	if now := c.now(); !stored.fresh(now) {
		logger.Info("Discovery memory kept by a previous holder is stale; not used", "configMap", name, "observed", stored.Observed, "staleAfter", storeStaleAfter)
		return true
	}
	n := c.memory.seed(stored)
	logger.Info("Discovery memory taken over from a previous holder", "configMap", name, "observed", stored.Observed, "groupVersions", n)
	if n > 0 {
		c.enqueueBlocked()
	}
	return true
}

// saveStore writes the memory when it changed (sameMemory), or when the last write is
// storeHeartbeat old, and reports whether the store is up to date. A conflict (someone else wrote it) or a
// ConfigMap created meanwhile makes it read the store again first.
func (c *Controller) saveStore(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	st := c.store
	name := st.kept.Name()
	snap := c.memory.snapshot()
	if snap.Observed.IsZero() {
		return true // nothing discovered yet
	}
	if st.written != nil && sameMemory(st.written, snap.GroupVersions) && snap.Observed.Sub(st.observed) < storeHeartbeat {
		return true
	}
	data, dropped, err := snap.encode()
	if err != nil {
		logger.Error(err, "Encoding the discovery memory")
		return false
	}
	if dropped > 0 {
		logger.Info("Discovery memory over its bounds; entries dropped (they block until seen answering again)", "dropped", dropped)
	}
	err = st.kept.Save(ctx, data)
	switch {
	case errors.Is(err, leasestate.ErrChanged):
		logger.Info("Discovery memory changed by another writer; reading it again", "configMap", name, "err", err.Error())
		c.metrics.storeOps.WithLabelValues("write", "conflict").Inc()
		return false
	case err != nil:
		logger.Error(err, "Cannot write the discovery memory; retrying", "configMap", name)
		c.metrics.storeOps.WithLabelValues("write", "error").Inc()
		return false
	}
	c.metrics.storeOps.WithLabelValues("write", "ok").Inc()
	st.written, st.observed = snap.GroupVersions, snap.Observed
	logger.V(2).Info("Discovery memory written", "configMap", name, "groupVersions", len(snap.GroupVersions), "observed", snap.Observed)
	return true
}

// sameMemory reports whether a and b say the same apart from when group versions that still
// answer last did: that moves on every discovery, and the heartbeat writes it often enough.
func sameMemory(a, b map[string]storedGV) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || !slices.Equal(x.Holders, y.Holders) || !slices.Equal(x.Others, y.Others) ||
			(x.FailingSince == nil) != (y.FailingSince == nil) ||
			(x.FailingSince != nil && (!x.FailingSince.Equal(*y.FailingSince) || !x.Served.Equal(y.Served))) {
			return false
		}
	}
	return true
}

// keepStore loads the store if not yet loaded and writes the memory after every discovery
// (woken by storeWake), retrying failures after storeRetry, until ctx ends.
func (c *Controller) keepStore(ctx context.Context) {
	leasestate.Keeper{Loaded: c.store.kept.Loaded, Load: c.loadStore, Save: c.saveStore, Wake: c.storeWake,
		Retry: storeRetry}.Run(ctx)
}
