package quota

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/leasestate"
)

// The staleness clocks of quotas that cannot be counted in full outlive the process (issue
// 49): the Lease holder keeps them in a ConfigMap beside its Lease, and the next holder
// starts from them, so kcm_split_quota_usage_staleness_seconds does not drop at a handover
// while a resource type stays uncountable. Only the clocks of quotas whose latest sync was
// partial are kept (a quota counted in full needs none); a kept clock is taken only when the
// next holder's own sync of the same quota (same UID) cannot count it either, and a quota
// it can count is fresh whatever was kept. The clock only feeds the gauge: nothing is
// decided from it.
const (
	// StalenessStoreSuffix names the ConfigMap: <Lease name>-staleness, in the Lease's
	// namespace.
	StalenessStoreSuffix = "-staleness"
	// StalenessStoreKey is the ConfigMap's one data key, JSON (keptClocks).
	StalenessStoreKey = "staleness.json"
	// stalenessStaleAfter: kept clocks written longer ago than this (or this far in the
	// future: another clock) are not taken: whoever held the Lease since may have counted the
	// quotas without writing. The holder writes at least every stalenessHeartbeat while a
	// quota is partial.
	stalenessStaleAfter = 10 * time.Minute
	stalenessHeartbeat  = 2 * time.Minute
	// keptCarry: clocks read and not matched yet are passed on for this long (every quota
	// of the shard is synced well before), then dropped with the quotas that are gone.
	keptCarry = stalenessStaleAfter
	// stalenessMaxQuotas bounds the ConfigMap (about 120 bytes a quota): over it, the
	// clocks that started last are dropped (their quotas show a lower bound after a
	// handover, as without the store).
	stalenessMaxQuotas = 2000
	// stalenessRetry is how soon a failed read or write is tried again; stalenessLoadTimeout
	// bounds the first read, made before the first sync.
	stalenessRetry       = 10 * time.Second
	stalenessLoadTimeout = 5 * time.Second
)

// keptClocks is the ConfigMap's content.
type keptClocks struct {
	// Observed is when the writer made it.
	Observed time.Time `json:"observed"`
	// Quotas are keyed namespace/name.
	Quotas map[string]keptClock `json:"quotas"`
}

// keptClock is one quota's: since when it has not been counted in full.
type keptClock struct {
	UID   types.UID `json:"uid"`
	Since time.Time `json:"since"`
}

// snapshot is what is given to the next holder at now: the clocks of the quotas not counted
// in full, and those kept and not matched yet while they are carried, bounded.
func (s *staleness) snapshot(now time.Time) keptClocks {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := keptClocks{Observed: now, Quotas: map[string]keptClock{}}
	if now.Sub(s.keptAt) < keptCarry {
		maps.Copy(out.Quotas, s.kept)
	}
	for qkey, uid := range s.partial {
		if since, ok := s.since[qkey]; ok {
			out.Quotas[qkey] = keptClock{UID: uid, Since: since}
		}
	}
	if len(out.Quotas) > stalenessMaxQuotas {
		keys := slices.SortedFunc(maps.Keys(out.Quotas), func(a, b string) int {
			return cmp.Or(out.Quotas[a].Since.Compare(out.Quotas[b].Since), cmp.Compare(a, b))
		})
		for _, k := range keys[stalenessMaxQuotas:] {
			delete(out.Quotas, k)
		}
	}
	return out
}

// seed takes the clocks a previous holder kept, when they are fresh at now; each is matched
// at this term's first partial sync of its quota (uncounted). It returns how many it took.
func (s *staleness) seed(k keptClocks, now time.Time) int {
	age := now.Sub(k.Observed)
	if k.Observed.IsZero() || age > stalenessStaleAfter || -age > stalenessStaleAfter {
		return 0
	}
	s.mu.Lock()
	n := 0
	for qkey, c := range k.Quotas {
		if c.UID == "" || c.Since.IsZero() || c.Since.After(k.Observed) || len(s.kept) >= stalenessMaxQuotas {
			continue
		}
		s.kept[qkey] = c
		n++
	}
	s.keptAt = now
	// Quotas already seen partial in this term take theirs now.
	var partial []string
	for qkey := range s.partial {
		if _, ok := s.kept[qkey]; ok {
			partial = append(partial, qkey)
		}
	}
	uids := make([]types.UID, len(partial))
	for i, qkey := range partial {
		uids[i] = s.partial[qkey]
	}
	s.mu.Unlock()
	for i, qkey := range partial {
		s.uncounted(qkey, uids[i], now)
	}
	return n
}

// clockStore is where the clocks are kept: shared/leasestate's Store.
type clockStore interface {
	Name() string
	Load(ctx context.Context) (value []byte, found bool, err error)
	Save(ctx context.Context, value []byte) error
	Loaded() bool
}

// clockKeeper writes the clocks to the store and reads them at the start of a term.
type clockKeeper struct {
	s     *staleness
	store clockStore
	log   klog.Logger
	now   func() time.Time
	// stored: what the store holds has clocks; written is what was last written, and when.
	stored    bool
	written   map[string]keptClock
	writtenAt time.Time
}

// keepClocksIn makes the controller keep its staleness clocks in store for the next Lease
// holder and start from what it holds: the first read is made now (bounded), so call it
// before Run; a goroutine then writes them when they change, and every stalenessHeartbeat
// while a quota is partial, until ctx ends. store writes through the fenced client.
func (c *Controller) keepClocksIn(ctx context.Context, store clockStore) {
	k := &clockKeeper{s: c.staleness, store: store, log: klog.FromContext(ctx).WithValues("configMap", store.Name()), now: func() time.Time { return c.now() }}
	lctx, cancel := context.WithTimeout(ctx, stalenessLoadTimeout)
	k.load(lctx)
	cancel()
	go k.run(ctx)
}

func (k *clockKeeper) load(ctx context.Context) bool {
	value, found, err := k.store.Load(ctx)
	if err != nil {
		k.log.Error(err, "Cannot read the staleness clocks kept by a previous holder; quotas not counted in full show their age from this term's first sync")
		return false
	}
	k.stored, k.written = false, nil
	if !found {
		k.log.V(2).Info("No staleness clocks kept by a previous holder")
		return true
	}
	k.stored = true // overwritten by the next write, whatever it holds
	var kept keptClocks
	if err := json.Unmarshal(value, &kept); err != nil {
		k.log.Error(err, "Staleness clocks kept by a previous holder do not parse; not used")
		return true
	}
	now := k.now()
	n := k.s.seed(kept, now)
	k.log.Info("Staleness clocks kept by a previous holder read", "observed", kept.Observed, "quotas", len(kept.Quotas), "taken", n)
	return true
}

// save writes the clocks when they differ from the last write, or when it is
// stalenessHeartbeat old and some are kept, and reports whether the store is up to date.
func (k *clockKeeper) save(ctx context.Context) bool {
	now := k.now()
	snap := k.s.snapshot(now)
	if len(snap.Quotas) == 0 && !k.stored {
		return true
	}
	if !k.writtenAt.IsZero() && maps.EqualFunc(snap.Quotas, k.written, func(a, b keptClock) bool { return a.UID == b.UID && a.Since.Equal(b.Since) }) && (len(snap.Quotas) == 0 || now.Sub(k.writtenAt) < stalenessHeartbeat) {
		return true
	}
	value, err := json.Marshal(snap)
	if err == nil {
		err = k.store.Save(ctx, value)
	}
	if err != nil {
		k.log.Error(err, "Cannot write the staleness clocks; retrying")
		return false
	}
	k.stored, k.written, k.writtenAt = len(snap.Quotas) > 0, snap.Quotas, now
	k.log.V(2).Info("Staleness clocks written", "quotas", len(snap.Quotas))
	return true
}

func (k *clockKeeper) run(ctx context.Context) {
	leasestate.Keeper{Loaded: k.store.Loaded, Load: k.load, Save: k.save, Wake: k.s.changed,
		Heartbeat: stalenessHeartbeat, Retry: stalenessRetry}.Run(ctx)
}
