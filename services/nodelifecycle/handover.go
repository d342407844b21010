// What a handover must not forget (issue 49): the partition guard's episode and each zone's
// NoExecute pace, kept by the Lease holder in one ConfigMap beside its Lease
// (shared/leasestate) and read by the next holder when its term starts.

package nodelifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/leasestate"
)

const (
	// StateStoreSuffix names the ConfigMap: <Lease name>-state, in the Lease's namespace.
	StateStoreSuffix = "-state"
	// StateStoreKey is its one data key, JSON (keptState).
	StateStoreKey = "state.json"
	// stateHeartbeat: the holder writes at least this often while it leads, so a record
	// older than stateStaleAfter was left by nobody who can still vouch for it.
	stateHeartbeat  = 30 * time.Second
	stateStaleAfter = 2 * time.Minute
	// stateMaxSkew: a record written this far in the reader's future is from another clock
	// and not believed.
	stateMaxSkew = 5 * time.Second
	// stateMinSpacing keeps writes apart; stateRetry is how soon a failed one is retried.
	stateMinSpacing = time.Second
	stateRetry      = 5 * time.Second
	// stateLoadTimeout bounds the read at the start of a term: the term does not wait longer.
	stateLoadTimeout = 10 * time.Second
	// The bounds: the apiserver takes 1 MiB per object; an entry is about 150 bytes.
	stateMaxBytes = 512 << 10
	stateMaxNodes = 3000
	stateMaxZones = 1000
)

// keptState is the ConfigMap's content.
type keptState struct {
	// Observed is the writer's clock when it wrote.
	Observed time.Time `json:"observed"`
	// Zones: each zone's last NoExecute taint (zone key -> when), with --keep-eviction-pace.
	Zones map[string]time.Time `json:"zones,omitempty"`
	// Partition: the guard's episode, with --partition-unknown-fraction.
	Partition *keptPartition `json:"partition,omitempty"`
	// Silent: the last sign of life of each Node silent for a while, with
	// --keep-signs-of-life.
	Silent map[string]keptSign `json:"silent,omitempty"`
}

// keptSign is one silent Node's last sign of life (the writer's clock), with the Lease
// renewal and Ready heartbeat it had then: believed only while the reader sees the same.
type keptSign struct {
	UID       types.UID  `json:"uid,omitempty"`
	Last      time.Time  `json:"last"`
	Renew     *time.Time `json:"renew,omitempty"`
	Heartbeat *time.Time `json:"heartbeat,omitempty"`
}

type keptPartition struct {
	// ReturnedAt is when the first held Node of the episode returned.
	ReturnedAt *time.Time `json:"returnedAt,omitempty"`
	// Nodes: held, returned or released Nodes (a pending one is judged again).
	Nodes map[string]keptHold `json:"nodes,omitempty"`
}

// keptHold is one Node's standing, with what the writer last saw of its signs of life: the
// next holder believes a held or released Node only while it sees the same ones (times from
// the objects, not from anyone's clock).
type keptHold struct {
	State     string     `json:"state"`
	UID       types.UID  `json:"uid,omitempty"`
	Renew     *time.Time `json:"renew,omitempty"`
	Heartbeat *time.Time `json:"heartbeat,omitempty"`
}

const (
	keptHeld     = "held"
	keptReturned = "returned"
	keptReleased = "released"
)

// stateKeeper is the controller's side of the ConfigMap. Only the keeper loop writes.
type stateKeeper struct {
	store *leasestate.Store
	wake  chan struct{}
	// written is the content (without Observed) of the last write, and when.
	written   []byte
	writtenAt time.Time
}

// keepStateIn makes the controller keep what a handover must not forget in ConfigMap name
// of cms, and start from what it holds. It does nothing unless a kept item is on. Call
// before Run.
func (c *Controller) keepStateIn(cms corev1client.ConfigMapInterface, name string) error {
	if !c.opts.KeepEvictionPace && !c.opts.KeepSignsOfLife && !c.partition.enabled() {
		return nil
	}
	store, err := leasestate.New(cms, name, leasestate.Options{Key: StateStoreKey, MaxBytes: stateMaxBytes, ManagedBy: ControllerID})
	if err != nil {
		return err
	}
	c.state = &stateKeeper{store: store, wake: make(chan struct{}, 1)}
	return nil
}

// wakeState asks the keeper loop to write if something changed.
func (c *Controller) wakeState() {
	if c.state == nil {
		return
	}
	select {
	case c.state.wake <- struct{}{}:
	default:
	}
}

// loadState reads what the previous holder kept, at the start of a term (the caches synced,
// no round run yet), and starts from what it may believe. A record that cannot be read makes
// every zone's first taint wait one interval from now; a partition record is believed only
// when fresh, and each Node's standing only while this process sees what the writer saw.
func (c *Controller) loadState(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("configMap", c.state.store.Name())
	rctx, cancel := context.WithTimeout(ctx, stateLoadTimeout)
	defer cancel()
	data, found, err := c.state.store.Load(rctx)
	var kept keptState
	result := "ok"
	if err != nil {
		result = "error"
	}
	c.metrics.stateOps.WithLabelValues("read", result).Inc()
	switch {
	case err != nil:
		logger.Error(err, "Cannot read the state kept by the previous leader: each zone's first NoExecute taint waits one interval, and Unknown nodes are judged afresh")
		c.paceUnknown()
		return
	case !found:
		logger.Info("No state kept by a previous leader")
		return
	}
	if err := json.Unmarshal(data, &kept); err != nil {
		logger.Error(err, "State kept by the previous leader does not parse: each zone's first NoExecute taint waits one interval, and Unknown nodes are judged afresh")
		c.paceUnknown()
		return
	}
	now := c.now()
	if c.opts.KeepEvictionPace {
		c.inheritPace(kept.Zones, now)
	}
	if age := now.Sub(kept.Observed); kept.Observed.IsZero() || age > stateStaleAfter || -age > stateMaxSkew {
		logger.Info("State kept by the previous leader is stale; nodes are judged afresh", "observed", kept.Observed)
		return
	}
	if c.opts.KeepSignsOfLife {
		n := 0
		for name, k := range kept.Silent {
			if node, err := c.nodes.Get(name); err == nil && node.UID == k.UID && c.health.inherit(name, k.Last, k.Renew, k.Heartbeat) {
				n++
			}
		}
		logger.Info("Last signs of life of silent nodes taken over from the previous leader", "kept", len(kept.Silent), "believed", n)
	}
	if kept.Partition == nil || !c.partition.enabled() {
		return
	}
	holds, returnedAt := c.believeHolds(kept.Partition, now)
	held, released := c.partition.seed(holds, returnedAt)
	if held > 0 {
		c.metrics.partition.Set(1)
	}
	for _, name := range released {
		c.nodeQueue.Add(name)
	}
	logger.Info("Partition episode taken over from the previous leader", "observed", kept.Observed, "kept", len(kept.Partition.Nodes), "held", held, "released", len(released), "believed", len(holds))
}

// paceUnknown: what the previous holder tainted last is not known, so no zone may taint
// before one interval from now.
func (c *Controller) paceUnknown() {
	if !c.opts.KeepEvictionPace {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inheritAll = c.now()
}

// inheritPace takes each zone's last taint, in the reader's past at the latest.
func (c *Controller) inheritPace(zones map[string]time.Time, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inherited = make(map[string]time.Time, len(zones))
	for k, at := range zones {
		c.inherited[k] = earlier(at, now)
	}
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// believeHolds turns a kept episode into the guard's holds, checked against this process's
// view: a Node is taken only with the same UID, still Unknown; held or released only if its
// signs of life are those the writer saw. A held Node seen renewed since has returned (and
// starts the grace period of the others, from now). A Node not taken is judged afresh, which
// holds it until its own grace period and window have passed.
func (c *Controller) believeHolds(p *keptPartition, now time.Time) (map[string]*nodeHold, time.Time) {
	var returnedAt time.Time
	if p.ReturnedAt != nil {
		returnedAt = earlier(*p.ReturnedAt, now)
	}
	holds := map[string]*nodeHold{}
	for name, k := range p.Nodes {
		node, err := c.nodes.Get(name)
		if err != nil || node.UID != k.UID || readyStatus(node) != v1.ConditionUnknown {
			continue
		}
		h, ok := c.health.get(name)
		if !ok {
			continue
		}
		same := sameTime(k.Renew, h.renew) && sameTime(k.Heartbeat, h.heartbeat.Time)
		switch {
		case k.State == keptReleased && same:
			holds[name] = &nodeHold{state: holdReleased, signs: h.signs}
		case k.State == keptHeld && same:
			holds[name] = &nodeHold{state: holdHeld, signs: h.signs}
		case k.State == keptHeld, k.State == keptReturned:
			holds[name] = &nodeHold{state: holdReturned, signs: h.signs}
			if k.State == keptHeld && returnedAt.IsZero() {
				returnedAt = now
			}
		}
	}
	return holds, returnedAt
}

func sameTime(kept *time.Time, seen time.Time) bool {
	if kept == nil {
		return seen.IsZero()
	}
	return kept.Equal(seen)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// snapshotState is what to keep now.
func (c *Controller) snapshotState() keptState {
	var kept keptState
	if c.opts.KeepEvictionPace {
		c.mu.Lock()
		for k, z := range c.zones {
			if at := z.tainter.lastTaint(); !at.IsZero() {
				if kept.Zones == nil {
					kept.Zones = map[string]time.Time{}
				}
				kept.Zones[k] = at
			}
		}
		c.mu.Unlock()
	}
	if c.partition.enabled() {
		states, returnedAt := c.partition.standing()
		p := &keptPartition{ReturnedAt: timePtr(returnedAt), Nodes: map[string]keptHold{}}
		for name, st := range states {
			node, err := c.nodes.Get(name)
			if err != nil {
				continue
			}
			k := keptHold{UID: node.UID}
			switch st {
			case holdHeld, holdReleased:
				k.State = keptHeld
				if st == holdReleased {
					k.State = keptReleased
				}
				h, _ := c.health.get(name)
				k.Renew, k.Heartbeat = timePtr(h.renew), timePtr(h.heartbeat.Time)
			case holdReturned:
				k.State = keptReturned
			default:
				continue
			}
			p.Nodes[name] = k
		}
		kept.Partition = p
	}
	if c.opts.KeepSignsOfLife {
		for name, h := range c.health.silentSince(c.now().Add(-c.signsMinSilence())) {
			node, err := c.nodes.Get(name)
			if err != nil {
				continue
			}
			if kept.Silent == nil {
				kept.Silent = map[string]keptSign{}
			}
			kept.Silent[name] = keptSign{UID: node.UID, Last: h.lastSignOfLife, Renew: timePtr(h.renew), Heartbeat: timePtr(h.heartbeat.Time)}
		}
	}
	return kept
}

// signsMinSilence is how long a Node must have been silent for its last sign of life to be
// kept: the partition guard's window (a quarter of the grace period, at least one monitor
// period), longer than a kubelet's renewal interval, so healthy Nodes are not written.
func (c *Controller) signsMinSilence() time.Duration {
	return max(c.opts.MonitorPeriod, c.opts.MonitorGracePeriod/4)
}

// bound drops entries over the bounds: first those that change nothing when missing (held
// and returned Nodes: a Node not judged is held), then released Nodes and zones by name from
// the end (a released Node missing is held again; a zone missing taints at once, as
// upstream). It returns the JSON of s without Observed and how many entries it dropped.
func (s *keptState) bound() ([]byte, int, error) {
	dropped := 0
	for step := 0; ; step++ {
		obs := s.Observed
		s.Observed = time.Time{}
		b, err := json.Marshal(s)
		s.Observed = obs
		nodes := 0
		if s.Partition != nil {
			nodes = len(s.Partition.Nodes)
		}
		if err != nil || (len(b) <= stateMaxBytes-64 && nodes <= stateMaxNodes && len(s.Zones) <= stateMaxZones && len(s.Silent) <= stateMaxNodes) {
			return b, dropped, err
		}
		// A silent Node dropped gets a full grace period from the next leader, as upstream.
		if len(s.Silent) > 0 && (len(s.Silent) > stateMaxNodes || len(b) > stateMaxBytes-64) {
			dropped += cutTenth(s.Silent, true)
			continue
		}
		if step == 0 && s.Partition != nil {
			for name, k := range s.Partition.Nodes {
				if k.State != keptReleased {
					delete(s.Partition.Nodes, name)
					dropped++
				}
			}
			continue
		}
		tooBig := len(b) > stateMaxBytes-64
		dropped += cutTenth(s.Zones, len(s.Zones) > stateMaxZones || (tooBig && nodes == 0))
		if s.Partition != nil {
			dropped += cutTenth(s.Partition.Nodes, nodes > stateMaxNodes || tooBig)
		}
	}
}

// cutTenth drops the last tenth of m by key (at least one) when over.
func cutTenth[V any](m map[string]V, over bool) int {
	if !over || len(m) == 0 {
		return 0
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	cut := max(1, len(keys)/10)
	for _, k := range keys[len(keys)-cut:] {
		delete(m, k)
	}
	return cut
}

// saveState writes what to keep when it changed, or when the last write is stateHeartbeat
// old; it reports whether the ConfigMap is up to date.
func (c *Controller) saveState(ctx context.Context) bool {
	logger := klog.FromContext(ctx).WithValues("configMap", c.state.store.Name())
	st := c.state
	kept := c.snapshotState()
	body, dropped, err := kept.bound()
	if err != nil {
		logger.Error(err, "Encoding the state kept for the next leader")
		return false
	}
	now := c.now()
	if st.written != nil && bytes.Equal(body, st.written) && now.Sub(st.writtenAt) < stateHeartbeat {
		return true
	}
	if dropped > 0 {
		logger.Info("State kept for the next leader over its bounds; entries dropped (a dropped Node is held by the next leader until judged afresh)", "dropped", dropped)
	}
	kept.Observed = now
	data, err := json.Marshal(kept)
	if err == nil {
		err = st.store.Save(ctx, data)
	}
	switch {
	case errors.Is(err, leasestate.ErrChanged):
		logger.Info("State kept for the next leader changed by another writer; reading it again", "err", err.Error())
		c.metrics.stateOps.WithLabelValues("write", "conflict").Inc()
		return false
	case err != nil:
		logger.Error(err, "Cannot write the state kept for the next leader; retrying")
		c.metrics.stateOps.WithLabelValues("write", "error").Inc()
		return false
	}
	c.metrics.stateOps.WithLabelValues("write", "ok").Inc()
	st.written, st.writtenAt = body, now
	return true
}

// keepState writes the state when woken (after each round and each NoExecute taint), at
// most every stateMinSpacing, and every stateHeartbeat, until ctx ends. A store that could
// not be read at the start of the term (or changed under it) is read again first; what it
// holds then is not taken (this term has judged for itself meanwhile), only its version.
func (c *Controller) keepState(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		ok := c.state.store.Loaded()
		if !ok {
			_, _, err := c.state.store.Load(ctx)
			if ok = err == nil; !ok {
				logger.Error(err, "Cannot read the state kept for the next leader; retrying", "configMap", c.state.store.Name())
				c.metrics.stateOps.WithLabelValues("read", "error").Inc()
			}
		}
		if ok {
			ok = c.saveState(ctx)
		}
		wait := stateHeartbeat
		if !ok {
			wait = stateRetry
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-c.state.wake:
			timer.Stop()
		case <-timer.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(stateMinSpacing):
		}
	}
}
