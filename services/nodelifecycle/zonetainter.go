package nodelifecycle

import (
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// zoneTainter is one zone's queue of Nodes waiting for a NoExecute taint, drained at the
// zone's rate with a burst of one (upstream's): the first Node of a quiet zone is tainted
// as soon as it may be, the next ones one per 1/rate seconds. Rate 0 holds the queue.
//
// A Node may be tainted only once it has waited settle (one --node-monitor-period). Nodes
// that fail together (a rack, a zone, the control plane's network) are detected over a
// short spread of time, as their last heartbeats were; the wait lets the zone state count
// all of them before the first one is tainted, so a zone going down is recognised as
// disrupted instead of losing its first Node's Pods. Upstream gets a similar, weaker window
// from checking all Nodes only once per period. Safe for concurrent use.
type zoneTainter struct {
	mu      sync.Mutex
	rate    float64
	settle  time.Duration
	limiter *rate.Limiter
	order   []queuedNode
	queued  map[string]bool
	// inherited is the last NoExecute taint of the zone before this term (the previous
	// holder's, kept in the cluster: handover.go), or this term's start when that is not
	// known; zero if none. The first taint of the term waits until the rate allows one after
	// it; from then on the limiter alone paces the zone.
	inherited time.Time
	// last is when this term last took a Node off the queue to taint (zero: never).
	last time.Time
}

type queuedNode struct {
	name string
	at   time.Time // when it may be tainted
}

// newZoneTainter returns an empty queue at rate r. Its limiter starts with its one token, as
// upstream's.
func newZoneTainter(r float64, settle time.Duration) *zoneTainter {
	return &zoneTainter{rate: r, settle: settle, queued: map[string]bool{}, limiter: rate.NewLimiter(rate.Limit(r), 1)}
}

// setRate changes the rate; a token already spent stays spent, so switching rates never
// grants an extra burst.
func (z *zoneTainter) setRate(r float64, now time.Time) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if r == z.rate {
		return
	}
	z.rate = r
	if r > 0 {
		z.limiter.SetLimitAt(now, rate.Limit(r))
	}
}

// Rate returns the current rate.
func (z *zoneTainter) Rate() float64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.rate
}

// add queues node at now unless it is queued already (it then keeps its place); it reports
// whether it was added.
func (z *zoneTainter) add(node string, now time.Time) bool {
	return z.push(node, now.Add(z.settle))
}

func (z *zoneTainter) push(node string, at time.Time) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.queued[node] {
		return false
	}
	z.queued[node] = true
	z.order = append(z.order, queuedNode{name: node, at: at})
	return true
}

// remove drops node from the queue; it reports whether it was queued.
func (z *zoneTainter) remove(node string) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	if !z.queued[node] {
		return false
	}
	delete(z.queued, node)
	z.order = slices.DeleteFunc(z.order, func(q queuedNode) bool { return q.name == node })
	return true
}

// clear empties the queue.
func (z *zoneTainter) clear() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.order, z.queued = nil, map[string]bool{}
}

// pending is the number of queued Nodes.
func (z *zoneTainter) pending() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return len(z.order)
}

// next takes the head of the queue if it has waited long enough and the rate allows one
// more Node now.
func (z *zoneTainter) next(now time.Time) (string, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if len(z.order) == 0 || z.rate <= 0 || now.Before(z.order[0].at) {
		return "", false
	}
	if !z.inherited.IsZero() && now.Sub(z.inherited).Seconds()*z.rate < 1 {
		return "", false
	}
	if !z.limiter.AllowN(now, 1) {
		return "", false
	}
	z.inherited, z.last = time.Time{}, now
	node := z.order[0].name
	z.order = z.order[1:]
	delete(z.queued, node)
	return node, true
}

// retry puts a Node whose tainting failed back at the end of the queue, ready at once,
// unless it was queued again meanwhile.
func (z *zoneTainter) retry(node string, now time.Time) { z.push(node, now) }

// inherit makes the zone's first taint of this term wait until the rate allows one after
// at: the previous holder's last taint of the zone, or now when it is not known.
func (z *zoneTainter) inherit(at time.Time) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.last.IsZero() {
		z.inherited = at
	}
}

// lastTaint is when this term last took a Node to taint, or else what it inherited.
func (z *zoneTainter) lastTaint() time.Time {
	z.mu.Lock()
	defer z.mu.Unlock()
	if !z.last.IsZero() {
		return z.last
	}
	return z.inherited
}
