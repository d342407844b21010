// Package handover reads, from an apiserver's audit log, whether two sets of writers handed
// their objects over cleanly: KCM's controllers and kcm-split's, each allowed to write during
// its own terms. It works on events from any log: testenv.Env's (Env.Writes) or a file on disk
// (testenv.ReadAuditFiles, e.g. a kubeadm apiserver's --audit-log-path, rotation included).
//
//	evs, _ := testenv.ReadAuditFiles[testenv.AuditEvent]("/var/log/kubernetes/audit/audit.log")
//	res := handover.TwoWriters(evs,
//		handover.Side{Name: "KCM", Writes: handover.KCMByServiceAccount(handover.KCMClients...), Terms: kcmTerms},
//		handover.Side{Name: "kcm-split", Writes: handover.KcmSplitWrites(handover.KcmSplitIDs...), Terms: ourTerms})
//	// res.TwoWriters == nil: no object written by both sides in overlapping terms.
package handover

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Term is a stretch of time [From, To) during which a side is allowed to write: a To of zero
// leaves it open (still allowed).
type Term struct {
	From, To time.Time
}

// Covers reports whether at falls within t.
func (t Term) Covers(at time.Time) bool {
	return !at.Before(t.From) && (t.To.IsZero() || at.Before(t.To))
}

// Overlaps reports whether t and o share an instant.
func (t Term) Overlaps(o Term) bool {
	return (o.To.IsZero() || t.From.Before(o.To)) && (t.To.IsZero() || o.From.Before(t.To))
}

func (t Term) String() string {
	to := "open"
	if !t.To.IsZero() {
		to = t.To.Format(time.StampMicro)
	}
	return "[" + t.From.Format(time.StampMicro) + ", " + to + ")"
}

// Side is one set of writers.
type Side struct {
	// Name names the side in messages ("KCM", "kcm-split").
	Name string
	// Writes tells the side's writes from every other event.
	Writes func(testenv.AuditEvent) bool
	// Terms are when the side may write.
	Terms []Term
}

// ObjectKey names the object an event wrote, "group/resource namespace/name": a subresource
// (status) is the object's.
func ObjectKey(ev testenv.AuditEvent) string {
	r := ev.ObjectRef
	return fmt.Sprintf("%s/%s %s/%s", r.APIGroup, r.Resource, r.Namespace, r.Name)
}

// TwoWriter is an object written by both sides in overlapping terms, with one write of each
// side as evidence.
type TwoWriter struct {
	Object string
	A, B   testenv.AuditEvent
	// TermA and TermB are terms covering A and B, which overlap (one term, either side's,
	// when both writes fall in it).
	TermA, TermB Term
}

func (w TwoWriter) String() string {
	ev := func(e testenv.AuditEvent) string {
		return fmt.Sprintf("%s %s at %s", e.User.Username, e.Verb, e.RequestReceivedTimestamp.Format(time.StampMicro))
	}
	return fmt.Sprintf("%s: %s in %s and %s in %s", w.Object, ev(w.A), w.TermA, ev(w.B), w.TermB)
}

// Result is what TwoWriters found.
type Result struct {
	// A and B are the sides' names.
	A, B string
	// TwoWriters are the objects written by both sides in overlapping terms, by Object.
	TwoWriters []TwoWriter
	// OutOfTermA and OutOfTermB are each side's writes outside all of its own terms, in the
	// order of the events.
	OutOfTermA, OutOfTermB []testenv.AuditEvent
}

// Objects are the keys of the objects written by two writers.
func (r Result) Objects() []string {
	out := make([]string, 0, len(r.TwoWriters))
	for _, w := range r.TwoWriters {
		out = append(out, w.Object)
	}
	return out
}

// Examples describes the first n objects written by two writers (all if n < 0).
func (r Result) Examples(n int) []string {
	var out []string
	for i, w := range r.TwoWriters {
		if n >= 0 && i >= n {
			break
		}
		out = append(out, w.String())
	}
	return out
}

// TwoWriters finds the objects written by both sides in overlapping terms. Only successful
// writes count (a refused one changed nothing); evs are the events of the period under study,
// less what both sides write by design (a migration Lease). A write's terms are those of
// either side covering its time of receipt by the apiserver: an object is written by two
// writers when a write of a and a write of b fall in one term or in two overlapping terms. So
// with a's terms up to a switch point and b's from it, an object written by both after the
// switch counts (a wrote in b's term), one written by a before it and by b after does not.
// A write outside every term counts toward no pair: see OutOfTerm.
func TwoWriters(evs []testenv.AuditEvent, a, b Side) Result {
	terms := append(slices.Clone(a.Terms), b.Terms...)
	// seen[side][object][term] are the side's first and last writes of the object in that term.
	seen := [2]map[string]map[int]*span{{}, {}}
	res := Result{A: a.Name, B: b.Name}
	for _, ev := range evs {
		if !ev.IsWrite() || !ev.Succeeded() {
			continue
		}
		for side, s := range []Side{a, b} {
			if s.Writes == nil || !s.Writes(ev) {
				continue
			}
			at := ev.RequestReceivedTimestamp
			if !slices.ContainsFunc(s.Terms, func(t Term) bool { return t.Covers(at) }) {
				if side == 0 {
					res.OutOfTermA = append(res.OutOfTermA, ev)
				} else {
					res.OutOfTermB = append(res.OutOfTermB, ev)
				}
			}
			key := ObjectKey(ev)
			for i, t := range terms {
				if !t.Covers(at) {
					continue
				}
				m := seen[side][key]
				if m == nil {
					m = map[int]*span{}
					seen[side][key] = m
				}
				if sp := m[i]; sp == nil {
					m[i] = &span{first: ev, last: ev}
				} else {
					sp.add(ev)
				}
			}
		}
	}
	for key, inA := range seen[0] {
		if w, ok := pair(key, inA, seen[1][key], terms); ok {
			res.TwoWriters = append(res.TwoWriters, w)
		}
	}
	slices.SortFunc(res.TwoWriters, func(x, y TwoWriter) int { return strings.Compare(x.Object, y.Object) })
	return res
}

// span is a side's first and last write of an object in a term.
type span struct{ first, last testenv.AuditEvent }

func (s *span) add(ev testenv.AuditEvent) {
	at := ev.RequestReceivedTimestamp
	if at.Before(s.first.RequestReceivedTimestamp) {
		s.first = ev
	}
	if !at.Before(s.last.RequestReceivedTimestamp) {
		s.last = ev
	}
}

// pair finds a write in inA and one in inB whose terms overlap, as evidence: of each side's
// first and last writes in each term, the two closest in time (terms in order on a tie).
func pair(key string, inA, inB map[int]*span, terms []Term) (TwoWriter, bool) {
	var best TwoWriter
	found := false
	for _, i := range slices.Sorted(maps.Keys(inA)) {
		for _, j := range slices.Sorted(maps.Keys(inB)) {
			if !terms[i].Overlaps(terms[j]) {
				continue
			}
			for _, ea := range []testenv.AuditEvent{inA[i].first, inA[i].last} {
				for _, eb := range []testenv.AuditEvent{inB[j].first, inB[j].last} {
					w := TwoWriter{Object: key, A: ea, B: eb, TermA: terms[i], TermB: terms[j]}
					if !found || apart(w) < apart(best) {
						best, found = w, true
					}
				}
			}
		}
	}
	return best, found
}

// apart is the time between a pair's writes.
func apart(w TwoWriter) time.Duration {
	d := w.A.RequestReceivedTimestamp.Sub(w.B.RequestReceivedTimestamp)
	return max(d, -d)
}

// FirstWrite is when the apiserver received the first successful write within t that keep
// keeps; false if there is none.
func FirstWrite(evs []testenv.AuditEvent, t Term, keep func(testenv.AuditEvent) bool) (time.Time, bool) {
	var first time.Time
	for _, ev := range evs {
		at := ev.RequestReceivedTimestamp
		if ev.IsWrite() && ev.Succeeded() && t.Covers(at) && keep(ev) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// LastWrite is when the apiserver received the last successful write within t that keep
// keeps; false if there is none.
func LastWrite(evs []testenv.AuditEvent, t Term, keep func(testenv.AuditEvent) bool) (time.Time, bool) {
	var last time.Time
	for _, ev := range evs {
		at := ev.RequestReceivedTimestamp
		if ev.IsWrite() && ev.Succeeded() && t.Covers(at) && keep(ev) && at.After(last) {
			last = at
		}
	}
	return last, !last.IsZero()
}
