// --partition-unknown-fraction: telling the controller's own partition from dead Nodes.
//
// When the control plane loses its network to the Nodes, or this controller's view of the
// Leases stops, every Node falls silent at once. Upstream then marks every Pod not Ready
// (every Service loses every endpoint: k/k#105617, #77864, #80968) and taints every Node,
// although the Pods most likely still run and serve. Many Nodes falling silent together is
// the signature of that partition, not of that many machines dying; this file spots it and
// holds the Nodes concerned until each shows life again.

package nodelifecycle

import (
	"sync"
	"time"
)

// ReasonPartitionSuspected is the Event of a suspected partition, one per episode, on the
// kube-node-lease Namespace as the zone Events.
const ReasonPartitionSuspected = "PartitionSuspected"

// holdState is where one Node stands with the partition guard.
type holdState int

const (
	// holdPending: the Node fell silent less than a window ago; whether that is part of a
	// partition is decided when its window closes, and until then nothing is done to it.
	holdPending holdState = iota + 1
	// holdHeld: part of a suspected partition; no Pod marked not Ready, no taint, until its
	// own sign of life or, once another held Node returned, a grace period.
	holdHeld
	// holdReturned: was held and showed life (its Lease renewed); its Ready condition stays
	// Unknown until its kubelet posts status, and nothing is done to it meanwhile.
	holdReturned
	// holdReleased: decided to be a silent Node like any other: handled as upstream until
	// it is not Unknown any more.
	holdReleased
)

type nodeHold struct {
	state holdState
	// since is when a pending Node fell silent (as this process saw it).
	since time.Time
	// signs is the Node's count of signs of life when it fell silent: any other value
	// means it showed life since.
	signs uint64
}

// silence is what one Node contributes to the guard in one round.
type silence struct {
	name string
	// unknown: the Node's Ready condition is Unknown.
	unknown bool
	// silent: and its grace period has ended (no sign of life heard within it).
	silent bool
	signs  uint64
}

// partitionVerdict is what one round of the guard decided.
type partitionVerdict struct {
	// started: an episode began with held Nodes.
	started bool
	held    int
	// ended: the last held Node returned or was released.
	ended bool
	// released are Nodes whose hold ended without a sign of life: from now on they are
	// handled as upstream (their condition taints need a sync).
	released []string
	// resync are Nodes no longer held because they left Unknown: a sync of their
	// condition taints may have run while they were still held.
	resync []string
	// next is when the guard must look again (a window closing, a grace period ending);
	// zero if nothing is due.
	next time.Time
}

// partitionGuard holds Nodes that fell silent together. Safe for concurrent use: the monitor
// judges, the Node and Pod workers ask.
type partitionGuard struct {
	// fraction of all Nodes that must fall silent within window of one another.
	fraction float64
	// window is how close together silences count as "at once". Nodes stopped at the same
	// instant fall silent spread over one renewal interval of their Leases (their last
	// renewals were), a quarter of the Lease's duration for kubelets (10 s by default). A
	// quarter of the grace period covers that whenever the grace period is at least the
	// Lease duration, as it must be for a Lease to keep a Node healthy; and at least one
	// monitor period, the span of one of upstream's passes.
	window time.Duration
	// grace is how long held Nodes wait after the first of them returned: a Node still
	// silent a grace period after the partition healed is silent for its own reasons.
	grace time.Duration

	mu         sync.Mutex
	nodes      map[string]*nodeHold
	suspected  bool
	returnedAt time.Time // when the first held Node of this episode returned; zero if none yet
}

func newPartitionGuard(o Options) *partitionGuard {
	return &partitionGuard{
		fraction: o.PartitionUnknownFraction,
		window:   max(o.MonitorPeriod, o.MonitorGracePeriod/4),
		grace:    o.MonitorGracePeriod,
		nodes:    map[string]*nodeHold{},
	}
}

// enabled reports whether the guard is on (--partition-unknown-fraction above 0).
func (g *partitionGuard) enabled() bool { return g.fraction > 0 }

// holds reports, for a Node whose Ready condition is Unknown, whether nothing may be done
// to it for that: no Pod marked not Ready, no taint added, removed or swapped for its Ready
// condition. That is every such Node the guard has not released: those pending or held,
// and those it has not judged yet. The last are Nodes just marked Unknown (their Node
// update can reach the taint sync before the round that wrote it judges them) and Nodes
// Unknown but heard from within their grace period (a kubelet back that has not posted
// Ready yet, or every Node when this process starts leading).
func (g *partitionGuard) holds(name string) bool {
	if !g.enabled() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.nodes[name]
	return h == nil || h.state != holdReleased
}

// forget drops a deleted Node.
func (g *partitionGuard) forget(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.nodes, name)
}

// judge takes one round's view of the Nodes (total of them listed; obs for those whose
// health was updated) and decides who is held.
func (g *partitionGuard) judge(now time.Time, total int, obs []silence) partitionVerdict {
	var v partitionVerdict
	if !g.enabled() {
		return v
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range obs {
		g.observe(now, o, &v)
	}
	g.startEpisode(now, total, &v)
	g.settle(now, &v)
	return v
}

// fellSilent starts tracking a Node that has just fallen silent. g.mu is held.
func (g *partitionGuard) fellSilent(now time.Time, o silence) {
	if g.suspected {
		// During an episode, a Node falling silent is most likely the same partition
		// reaching it later.
		g.nodes[o.name] = &nodeHold{state: holdHeld, signs: o.signs}
		return
	}
	g.nodes[o.name] = &nodeHold{state: holdPending, since: now, signs: o.signs}
}

// observe moves one Node's hold on from its updated health. g.mu is held.
func (g *partitionGuard) observe(now time.Time, o silence, v *partitionVerdict) {
	h := g.nodes[o.name]
	if !o.unknown {
		// Its kubelet posted Ready (or NotReady): not silent, nothing to hold.
		if h != nil {
			delete(g.nodes, o.name)
			if h.state == holdHeld && g.returnedAt.IsZero() {
				// Back and posting in one go, without a round that saw only its Lease.
				g.returnedAt = now
			}
			if h.state != holdReleased {
				v.resync = append(v.resync, o.name)
			}
		}
		return
	}
	if h == nil {
		if o.silent {
			g.fellSilent(now, o)
		}
		return
	}
	switch h.state {
	case holdPending:
		if o.signs != h.signs {
			delete(g.nodes, o.name) // alive after all: nothing to decide
		}
	case holdHeld:
		switch {
		case o.signs != h.signs:
			h.state = holdReturned
			if g.returnedAt.IsZero() {
				g.returnedAt = now
			}
		case !g.returnedAt.IsZero() && !now.Before(g.returnedAt.Add(g.grace)):
			h.state = holdReleased
			v.released = append(v.released, o.name)
		}
	case holdReturned:
		if o.silent {
			g.fellSilent(now, o) // silent again since its return: a new silence
		}
	}
}

// startEpisode holds the pending Nodes that fell silent together when they are more than the
// fraction of all total Nodes. Pending Nodes whose window is still open fell silent within
// one window of the last one to: they fell silent together. g.mu is held.
func (g *partitionGuard) startEpisode(now time.Time, total int, v *partitionVerdict) {
	together := func(h *nodeHold) bool { return h.state == holdPending && now.Before(h.since.Add(g.window)) }
	pending := 0
	for _, h := range g.nodes {
		if together(h) {
			pending++
		}
	}
	if g.suspected || pending == 0 || float64(pending) <= g.fraction*float64(total) {
		return
	}
	g.suspected, v.started = true, true
	for _, h := range g.nodes {
		if together(h) {
			h.state = holdHeld
		}
	}
}

// settle releases the pending Nodes whose window closed, counts the held ones, sets when to
// look again and ends the episode once no Node is held. g.mu is held.
func (g *partitionGuard) settle(now time.Time, v *partitionVerdict) {
	for name, h := range g.nodes {
		switch h.state {
		case holdPending:
			// Its window closed without enough company: an ordinary silent Node.
			if closes := h.since.Add(g.window); !now.Before(closes) {
				h.state = holdReleased
				v.released = append(v.released, name)
			} else if v.next.IsZero() || closes.Before(v.next) {
				v.next = closes
			}
		case holdHeld:
			v.held++
		}
	}
	if g.suspected && v.held > 0 && !g.returnedAt.IsZero() {
		if d := g.returnedAt.Add(g.grace); v.next.IsZero() || d.Before(v.next) {
			v.next = d
		}
	}
	if g.suspected && v.held == 0 {
		g.suspected, g.returnedAt, v.ended = false, time.Time{}, true
	}
}

// standing is every judged Node's state and when the episode's first held Node returned:
// what the next leader starts from (handover.go).
func (g *partitionGuard) standing() (map[string]holdState, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]holdState, len(g.nodes))
	for name, h := range g.nodes {
		out[name] = h.state
	}
	return out, g.returnedAt
}

// seed starts a term from the standing a previous leader kept, as believed (handover.go),
// before the first round: an episode is under way if a Node is held. It returns how many are
// held and the Nodes released.
func (g *partitionGuard) seed(holds map[string]*nodeHold, returnedAt time.Time) (int, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	held := 0
	var released []string
	for name, h := range holds {
		g.nodes[name] = h
		switch h.state {
		case holdHeld:
			held++
		case holdReleased:
			released = append(released, name)
		}
	}
	if held > 0 {
		g.suspected, g.returnedAt = true, returnedAt
	}
	return held, released
}
