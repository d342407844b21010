package foreign

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/kcm-split/kcm-split/shared/leasestate"
)

// Episodes outlive the process (issue 49): the Lease holder keeps those in progress, per
// (controller, manager) when it began and when the manager was last seen writing, in a
// ConfigMap beside its Lease (Keep), and the next holder starts from them, so that a writer
// still at it after a handover continues its episode instead of being reported again. What is
// kept only ever suppresses a report within the quiet period of a write already reported; an
// entry that cannot be read, is stale or names a controller this Detector does not track is
// not taken, and the writer is reported as by a Detector that never knew.
const (
	// EpisodesSuffix names the ConfigMap: <Lease name>-foreign-writers, in the Lease's
	// namespace.
	EpisodesSuffix = "-foreign-writers"
	// EpisodesKey is the ConfigMap's one data key, JSON (keptEpisodes).
	EpisodesKey = "episodes.json"
	// keepHeartbeat: while an episode is in progress, its last sighting is written at least
	// this often (a sighting within an episode is not written at once). The next holder may
	// see it this much older than it was: an episode quiet for nearly the whole quiet period
	// is then reported once more, never less.
	keepHeartbeat = time.Minute
	// keepRetry is how soon a failed read or write is tried again.
	keepRetry = 10 * time.Second
	// keepLoadTimeout bounds the first read, made before the informers start.
	keepLoadTimeout = 5 * time.Second
	// keepSkew is how far in the future a kept sighting may be (another clock) and still be
	// believed, as now.
	keepSkew = time.Minute
)

// keptEpisodes is the ConfigMap's content.
type keptEpisodes struct {
	// Observed is when the writer made it.
	Observed time.Time     `json:"observed"`
	Episodes []keptEpisode `json:"episodes"`
}

type keptEpisode struct {
	Controller string    `json:"controller"`
	Manager    string    `json:"manager"`
	Start      time.Time `json:"start"`
	Last       time.Time `json:"last"`
}

// Store keeps a value for the next Lease holder: shared/leasestate's Store.
type Store interface {
	Name() string
	// Load reads the value; found is false when nothing is kept.
	Load(ctx context.Context) (value []byte, found bool, err error)
	// Save writes it, conditioned on what was last read or written.
	Save(ctx context.Context, value []byte) error
	// Loaded reports whether Save is allowed (read, and not changed by anybody else since).
	Loaded() bool
}

// snapshot is the episodes in progress at now, most recent first.
func (d *Detector) snapshot(now time.Time) keptEpisodes {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := keptEpisodes{Observed: now, Episodes: []keptEpisode{}}
	for k, e := range d.episodes {
		if now.Sub(e.last) < d.quiet {
			out.Episodes = append(out.Episodes, keptEpisode{Controller: k.controller, Manager: k.manager, Start: e.start, Last: e.last})
		}
	}
	slices.SortFunc(out.Episodes, func(a, b keptEpisode) int {
		if c := b.Last.Compare(a.Last); c != 0 {
			return c
		}
		return compareKeys(a, b)
	})
	return out
}

func compareKeys(a, b keptEpisode) int {
	return cmp.Or(cmp.Compare(a.Controller, b.Controller), cmp.Compare(a.Manager, b.Manager))
}

// resume takes over the kept episodes that are still in progress at now, checked against what
// this Detector knows: a controller it tracks, a start not after the last sighting, a last
// sighting within the quiet period (one up to keepSkew in the future counts as now). An
// episode this Detector already has keeps its own last sighting and the earlier start. It
// returns how many were taken.
func (d *Detector) resume(k keptEpisodes, now time.Time) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, e := range k.Episodes {
		if !d.tracked[e.Controller] || e.Manager == "" || d.ours[e.Manager] || d.ignored[e.Manager] ||
			e.Start.IsZero() || e.Start.After(e.Last) || e.Last.After(now.Add(keepSkew)) {
			continue
		}
		last := e.Last
		if last.After(now) {
			last = now
		}
		if now.Sub(last) >= d.quiet {
			continue
		}
		key := episodeKey{e.Controller, e.Manager}
		own, ok := d.episodes[key]
		switch {
		case ok && now.Sub(own.last) < d.quiet:
			if e.Start.Before(own.start) {
				own.start = e.Start
			}
			d.episodes[key] = own
		default:
			if !ok && len(d.episodes) >= d.maxEpisodes {
				continue // this Detector's own episodes win the room
			}
			d.episodes[key] = episode{start: earlier(e.Start, last), last: last}
		}
		n++
	}
	return n
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// signal wakes the keeper (Keep), if any.
func (d *Detector) signal() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// Keep makes the Detector keep its episodes in s for the next Lease holder and starts from
// what s holds: the first read is made now (bounded by keepLoadTimeout), so call Keep before
// the informers start; then a goroutine writes the episodes whenever one begins or ends and
// while one is in progress every keepHeartbeat, until ctx ends. s must write through the
// fenced client. Nothing is written before s has been read, nor while no episode is or was
// kept (no ConfigMap in a cluster without a second writer).
func (d *Detector) Keep(ctx context.Context, s Store) {
	k := &keeper{d: d, s: s, log: d.log.WithValues("configMap", s.Name())}
	lctx, cancel := context.WithTimeout(ctx, keepLoadTimeout)
	k.load(lctx)
	cancel()
	go k.run(ctx)
}

type keeper struct {
	d   *Detector
	s   Store
	log logr.Logger
	// stored: what s holds has episodes (false: absent or none), and when it was written
	// with which keys (starts included).
	stored  bool
	keys    []keptEpisode
	written time.Time
}

func (k *keeper) load(ctx context.Context) bool {
	value, found, err := k.s.Load(ctx)
	if err != nil {
		k.log.Error(err, "Cannot read the foreign-writer episodes kept by a previous holder; a writer still at it will be reported again")
		return false
	}
	k.stored, k.keys = false, nil
	if !found {
		return true
	}
	var kept keptEpisodes
	if err := json.Unmarshal(value, &kept); err != nil {
		k.log.Error(err, "Foreign-writer episodes kept by a previous holder do not parse; not used")
		k.stored = true // overwritten by the next write
		return true
	}
	k.stored = len(kept.Episodes) > 0
	if n := k.d.resume(kept, k.d.now()); n > 0 {
		k.log.Info("Foreign-writer episodes taken over from a previous holder: their writers are not reported again until quiet", "episodes", n, "observed", kept.Observed)
		k.d.signal()
	}
	return true
}

// save writes the episodes when their set changed or the last write is keepHeartbeat old,
// and reports whether s is up to date.
func (k *keeper) save(ctx context.Context) bool {
	now := k.d.now()
	snap := k.d.snapshot(now)
	keys := keysOf(snap.Episodes)
	if len(snap.Episodes) == 0 && !k.stored {
		return true
	}
	if !k.written.IsZero() && sameKeys(keys, k.keys) && (len(keys) == 0 || now.Sub(k.written) < keepHeartbeat) {
		return true
	}
	value, err := json.Marshal(snap)
	if err == nil {
		err = k.s.Save(ctx, value)
	}
	if err != nil {
		k.log.Error(err, "Cannot write the foreign-writer episodes; retrying")
		return false
	}
	k.stored, k.keys, k.written = len(snap.Episodes) > 0, keys, now
	k.log.V(2).Info("Foreign-writer episodes written", "episodes", len(snap.Episodes))
	return true
}

// keysOf is the episodes' identities and starts, in a fixed order.
func keysOf(es []keptEpisode) []keptEpisode {
	out := make([]keptEpisode, 0, len(es))
	for _, e := range es {
		out = append(out, keptEpisode{Controller: e.Controller, Manager: e.Manager, Start: e.Start})
	}
	slices.SortFunc(out, compareKeys)
	return out
}

func sameKeys(a, b []keptEpisode) bool {
	return slices.EqualFunc(a, b, func(x, y keptEpisode) bool {
		return x.Controller == y.Controller && x.Manager == y.Manager && x.Start.Equal(y.Start)
	})
}

func (k *keeper) run(ctx context.Context) {
	leasestate.Keeper{Loaded: k.s.Loaded, Load: k.load, Save: k.save, Wake: k.d.changed,
		Heartbeat: keepHeartbeat, Retry: keepRetry}.Run(ctx)
}

// EpisodesMaxBytes bounds the ConfigMap: DefaultMaxEpisodes episodes take about 10 KiB.
const EpisodesMaxBytes = 64 << 10

// KeepBesideLease is Keep with the ConfigMap <leaseName>-foreign-writers of cms (the Lease's
// namespace, through the fenced client), labelled managed by managedBy. Call it after Track,
// before the informers start.
func (d *Detector) KeepBesideLease(ctx context.Context, cms corev1client.ConfigMapInterface, leaseName, managedBy string) error {
	s, err := leasestate.New(cms, leasestate.Name(leaseName, EpisodesSuffix), leasestate.Options{Key: EpisodesKey, MaxBytes: EpisodesMaxBytes, ManagedBy: managedBy})
	if err != nil {
		return err
	}
	d.Keep(ctx, s)
	return nil
}
