package kubeadm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/kcm-split/kcm-split/deploy/tests/drills/handover"
)

// The take-over gate's log messages (shared/app/takeover): a binary starts its controllers on
// proof that KCM runs none of them, and stops them, its writes refused first, when the proof
// lapses.
const (
	msgStarting = "Take-over: kube-controller-manager runs none of the controllers; starting them"
	msgStopping = "Take-over: kube-controller-manager may run the controllers again; stopping them"
)

// TakeOverEvent is one take-over log line of a binary's Pod.
type TakeOverEvent struct {
	Binary string // the logger's name: the binary's ID
	Pod    string
	At     time.Time
	Start  bool   // starting them (else stopping them)
	Why    string // the proof, or the reason it lapsed
}

// logLine is what TakeOverEvents reads of a JSON log line (the chart's default format).
type logLine struct {
	TS     string `json:"ts"`
	Logger string `json:"logger"`
	Msg    string `json:"msg"`
	Proof  string `json:"proof"`
	Reason string `json:"reason"`
}

// tsLayout is the binaries' JSON time stamp (zap's ISO 8601 encoder: milliseconds).
const tsLayout = "2006-01-02T15:04:05.000Z0700"

// TakeOverEvents reads the take-over lines of one Pod's log (JSON lines; other lines skipped).
func TakeOverEvents(pod string, r io.Reader) ([]TakeOverEvent, error) {
	var out []TakeOverEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b := sc.Bytes()
		if len(b) == 0 || b[0] != '{' || !strings.Contains(string(b), "Take-over: ") {
			continue
		}
		var l logLine
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, fmt.Errorf("pod %s: %w: %s", pod, err, b)
		}
		if l.Msg != msgStarting && l.Msg != msgStopping {
			continue
		}
		at, err := time.Parse(tsLayout, l.TS)
		if err != nil {
			return nil, fmt.Errorf("pod %s: time stamp %q: %w", pod, l.TS, err)
		}
		ev := TakeOverEvent{Binary: l.Logger, Pod: pod, At: at, Start: l.Msg == msgStarting, Why: l.Reason}
		if ev.Start {
			ev.Why = l.Proof
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

// inFlight is how long after a binary logged "stopping them" a write it let out just before
// may still reach the apiserver: the gate refuses every write before it logs, so only requests
// already sent arrive later. Our terms end that much after the line: longer terms for our side
// can only find more two writers, never fewer.
const inFlight = time.Second

// OurTerms are the stretches each Pod ran its controllers, from its "starting them" (the
// milliseconds of the time stamp cut, so before the first write) to its "stopping them" plus
// inFlight; a term still running is open. The events of all Pods, in any order.
func OurTerms(evs []TakeOverEvent) map[string][]handover.Term {
	byPod := map[string][]TakeOverEvent{}
	for _, ev := range evs {
		byPod[ev.Pod] = append(byPod[ev.Pod], ev)
	}
	out := map[string][]handover.Term{}
	for pod, pevs := range byPod {
		slices.SortStableFunc(pevs, func(a, b TakeOverEvent) int { return a.At.Compare(b.At) })
		var open *handover.Term
		for _, ev := range pevs {
			switch {
			case ev.Start && open == nil:
				open = &handover.Term{From: ev.At}
			case !ev.Start && open != nil:
				open.To = ev.At.Add(inFlight)
				out[pod] = append(out[pod], *open)
				open = nil
			}
		}
		if open != nil {
			out[pod] = append(out[pod], *open)
		}
	}
	return out
}

// LeaseLog records every state of KCM's Lease seen (a watch or an informer's events), to tell
// when each of its processes may have led. Safe for concurrent use.
type LeaseLog struct {
	mu      sync.Mutex
	holders []*holder
}

// holder is one KCM process: its identity (host_uuid, new at each start), when it acquired the
// Lease, its latest renewal seen and the lease duration it set.
type holder struct {
	id        string
	acquired  time.Time
	lastRenew time.Time
	duration  time.Duration
}

// Observe records one state of the Lease.
func (l *LeaseLog) Observe(lease *coordinationv1.Lease) {
	s := lease.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id := *s.HolderIdentity
	var h *holder
	for _, x := range l.holders {
		if x.id == id {
			h = x
		}
	}
	if h == nil {
		h = &holder{id: id, acquired: s.RenewTime.Time}
		if s.AcquireTime != nil {
			h.acquired = s.AcquireTime.Time
		}
		l.holders = append(l.holders, h)
	}
	if s.RenewTime.After(h.lastRenew) {
		h.lastRenew = s.RenewTime.Time
	}
	if s.LeaseDurationSeconds != nil {
		h.duration = time.Duration(*s.LeaseDurationSeconds) * time.Second
	}
}

// Acquired are the holders seen, each with the time it acquired the Lease, in that order.
func (l *LeaseLog) Acquired() []HolderTerm {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]HolderTerm, 0, len(l.holders))
	for _, h := range l.holders {
		out = append(out, HolderTerm{ID: h.id, Term: handover.Term{From: h.acquired}})
	}
	slices.SortFunc(out, func(a, b HolderTerm) int { return a.From.Compare(b.From) })
	return out
}

// HolderTerm is a KCM process's term.
type HolderTerm struct {
	ID string
	handover.Term
}

// KCMTerms are the stretches each KCM process may have led, and so written: from acquiring the
// Lease to a lease duration after its last renewal seen. A leader that cannot renew stops
// leading (KCM exits) within its renew deadline, shorter than the duration, and a process the
// kubelet stopped renews no more; the next process takes the Lease only once it expired. The
// last holder's term is open (it still leads). Every process's term is there, whichever
// --controllers it ran: one that ran the replaced controllers off must not write as them at all.
func (l *LeaseLog) KCMTerms() []HolderTerm {
	l.mu.Lock()
	defer l.mu.Unlock()
	hs := slices.Clone(l.holders)
	slices.SortFunc(hs, func(a, b *holder) int { return a.acquired.Compare(b.acquired) })
	out := make([]HolderTerm, 0, len(hs))
	for i, h := range hs {
		t := HolderTerm{ID: h.id, Term: handover.Term{From: h.acquired}}
		if i < len(hs)-1 {
			t.To = h.lastRenew.Add(h.duration)
		}
		out = append(out, t)
	}
	return out
}
