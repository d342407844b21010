// The overwrite episodes kept for the next Lease holder (issue 49): the keeper moves
// allocation.KeptOverwrites to and from a ConfigMap beside the Lease.

package servicelb

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/servicelb/allocation"
	"github.com/kcm-split/kcm-split/shared/leasestate"
)

const (
	// OverwritesStoreSuffix names the ConfigMap: <Lease name>-overwrites, in the Lease's
	// namespace.
	OverwritesStoreSuffix = "-overwrites"
	// OverwritesKey is its one data key, JSON (allocation.KeptOverwrites).
	OverwritesKey = "overwrites.json"
	// overwritesHeartbeat: while an episode is in progress, its last sighting is written at
	// least this often. The next holder may see it this much older than it was: an episode
	// quiet for nearly its whole quiet period is then reported once more, never less.
	overwritesHeartbeat = time.Minute
	overwritesRetry     = 10 * time.Second
	// overwritesLoadTimeout bounds the first read, made before the informers start.
	overwritesLoadTimeout = 5 * time.Second
)

// overwriteStore is shared/leasestate's Store as the keeper uses it.
type overwriteStore interface {
	Name() string
	Load(ctx context.Context) ([]byte, bool, error)
	Save(ctx context.Context, value []byte) error
	Loaded() bool
}

// overwriteKeeper writes the state's overwrite episodes to its store whenever they change
// (a new episode, a rewrite, an episode gone) and every overwritesHeartbeat while one is in
// progress. It writes nothing before the store was read, nor while nothing is or was kept (no
// ConfigMap in a cluster without a second writer of Service status).
type overwriteKeeper struct {
	state *allocation.State
	s     overwriteStore
	now   func() time.Time
	log   logr.Logger
	// stored: the store holds episodes; written is when they were last written, and sig
	// what they were, last sightings aside.
	stored  bool
	written time.Time
	sig     []allocation.KeptOverwrite
}

// keepOverwritesBesideLease keeps c's overwrite episodes in the ConfigMap
// <leaseName>-overwrites of cms (the Lease's namespace, through the fenced client) and starts
// from what it holds: the first read is made now, so call it before the informers start.
func (c *Controller) keepOverwritesBesideLease(ctx context.Context, cms corev1client.ConfigMapInterface, leaseName string) error {
	s, err := leasestate.New(cms, leasestate.Name(leaseName, OverwritesStoreSuffix),
		leasestate.Options{Key: OverwritesKey, MaxBytes: allocation.KeptOverwritesMaxBytes, ManagedBy: ControllerID})
	if err != nil {
		return err
	}
	k := &overwriteKeeper{state: c.state, s: s, now: c.now, log: klog.FromContext(ctx).WithValues("configMap", s.Name())}
	lctx, cancel := context.WithTimeout(ctx, overwritesLoadTimeout)
	k.load(lctx)
	cancel()
	go k.run(ctx)
	return nil
}

func (k *overwriteKeeper) load(ctx context.Context) bool {
	value, found, err := k.s.Load(ctx)
	if err != nil {
		k.log.Error(err, "Cannot read the status overwrite episodes kept by a previous holder; a second writer still at it will be reported again, its backoff started over")
		return false
	}
	k.stored, k.sig = false, nil
	if !found {
		return true
	}
	var kept allocation.KeptOverwrites
	if err := json.Unmarshal(value, &kept); err != nil {
		k.log.Error(err, "Status overwrite episodes kept by a previous holder do not parse; not used")
		k.stored = true // overwritten by the next write
		return true
	}
	k.stored = len(kept.Episodes) > 0
	if n := k.state.ResumeOverwrites(kept, k.now()); n > 0 {
		k.log.Info("Status overwrite episodes taken over from a previous holder: each goes on with its backoff if its Service still shows another writer's status", "episodes", n, "observed", kept.Observed)
	}
	return true
}

// save writes the episodes when they changed or the last write is overwritesHeartbeat old,
// and reports whether the store is up to date.
func (k *overwriteKeeper) save(ctx context.Context) bool {
	now := k.now()
	snap := k.state.KeptOverwrites(now)
	sig := signature(snap.Episodes)
	if len(snap.Episodes) == 0 && !k.stored {
		return true
	}
	if !k.written.IsZero() && slices.Equal(sig, k.sig) && (len(sig) == 0 || now.Sub(k.written) < overwritesHeartbeat) {
		return true
	}
	value, err := json.Marshal(snap)
	if err == nil {
		err = k.s.Save(ctx, value)
	}
	if err != nil {
		k.log.Error(err, "Cannot write the status overwrite episodes; retrying")
		return false
	}
	k.stored, k.sig, k.written = len(snap.Episodes) > 0, sig, now
	k.log.V(2).Info("Status overwrite episodes written", "episodes", len(snap.Episodes))
	return true
}

// signature is the episodes without their last sightings, by key.
func signature(es []allocation.KeptOverwrite) []allocation.KeptOverwrite {
	out := make([]allocation.KeptOverwrite, 0, len(es))
	for _, e := range es {
		e.Seen = time.Time{}
		e.Start, e.Next = e.Start.UTC(), e.Next.UTC()
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b allocation.KeptOverwrite) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func (k *overwriteKeeper) run(ctx context.Context) {
	leasestate.Keeper{Loaded: k.s.Loaded, Load: k.load, Save: k.save, Wake: k.state.OverwritesChanged(),
		Heartbeat: overwritesHeartbeat, Retry: overwritesRetry}.Run(ctx)
}
