// Overwrite episodes kept for the next Lease holder (issue 49).

package allocation

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The overwrite episodes in progress outlive the term: the Lease holder keeps, per Service in
// one, its UID, when the episode began and was last seen, its backoff step and a hash of the
// ingress last written (KeptOverwrites); the next holder takes them (ResumeOverwrites) and,
// at the first backoff decision of each Service, believes one only if the Service is the same
// (UID), still wanted what was written (the hash of what it wants now) and still shows
// something else (status). Then its first write goes on with the episode's backoff and no new
// Event. An entry that is stale, does not parse or does not match is dropped and the Service
// is handled as by a holder that never knew: the kept state only ever delays a rewrite of the
// status we want and spares an Event; it never releases, moves or clears an address.
const (
	// MaxKeptOverwrites bounds what is kept: the episodes seen last win.
	MaxKeptOverwrites = 500
	// KeptOverwritesMaxBytes bounds their JSON: MaxKeptOverwrites entries of Services of
	// long names take about 150 KiB.
	KeptOverwritesMaxBytes = 256 << 10
	// keptSkew is how far in the future a kept time (another clock) may be and still be
	// believed, as now.
	keptSkew = time.Minute
)

// KeptOverwrites is what the Lease holder keeps.
type KeptOverwrites struct {
	// Observed is when the writer made it.
	Observed time.Time       `json:"observed"`
	Episodes []KeptOverwrite `json:"episodes"`
}

// KeptOverwrite is one Service's overwrite episode.
type KeptOverwrite struct {
	Key      string    `json:"key"`
	UID      types.UID `json:"uid"`
	Start    time.Time `json:"start"`
	Seen     time.Time `json:"seen"`
	Next     time.Time `json:"next"`
	Attempts int       `json:"attempts"`
	// Written is IngressHash of the ingress last written.
	Written string `json:"written"`
}

// IngressHash identifies an ingress list as IngressEqual compares it.
func IngressHash(in []v1.LoadBalancerIngress) string {
	var b strings.Builder
	for _, i := range in {
		mode := ""
		if i.IPMode != nil {
			mode = string(*i.IPMode)
		}
		fmt.Fprintf(&b, "%s|%s|%s|%d\n", i.IP, i.Hostname, mode, len(i.Ports))
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:12])
}

// OverwritesChanged is signalled when what KeptOverwrites returns has changed, other than
// the times of the last sightings.
func (s *State) OverwritesChanged() <-chan struct{} { return s.overwritesChanged }

func (s *State) signalOverwrites() {
	select {
	case s.overwritesChanged <- struct{}{}:
	default:
	}
}

// KeptOverwrites is the overwrite episodes in progress at now, the last seen first, at most
// MaxKeptOverwrites: this term's, and those taken from the previous holder not yet matched.
func (s *State) KeptOverwrites(now time.Time) KeptOverwrites {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := KeptOverwrites{Observed: now, Episodes: []KeptOverwrite{}}
	for key, e := range s.overwrites {
		last, ok := s.lastWritten[key]
		if !ok || e.uid == "" || e.attempts == 0 || now.Sub(e.seen) > overwriteQuiet {
			continue
		}
		out.Episodes = append(out.Episodes, KeptOverwrite{Key: key, UID: e.uid, Start: e.start, Seen: e.seen,
			Next: e.next, Attempts: e.attempts, Written: IngressHash(last)})
	}
	for _, k := range s.kept {
		if now.Sub(k.Seen) <= overwriteQuiet {
			out.Episodes = append(out.Episodes, k)
		}
	}
	slices.SortFunc(out.Episodes, func(a, b KeptOverwrite) int {
		return cmp.Or(b.Seen.Compare(a.Seen), cmp.Compare(a.Key, b.Key))
	})
	if len(out.Episodes) > MaxKeptOverwrites {
		out.Episodes = out.Episodes[:MaxKeptOverwrites]
	}
	return out
}

// ResumeOverwrites takes the episodes of k still in progress at now, to be matched against
// their Service at its first backoff decision (OverwriteBackoff). Nothing is taken from a k
// observed over overwriteQuiet ago or over keptSkew ahead; an entry is taken only complete,
// last seen within overwriteQuiet (a time up to keptSkew ahead counts as now), and for a
// Service of which this term knows nothing written yet. Its next write is never put off past
// overwriteSlow from now. It returns how many were taken.
func (s *State) ResumeOverwrites(k KeptOverwrites, now time.Time) int {
	if k.Observed.After(now.Add(keptSkew)) || now.Sub(k.Observed) > overwriteQuiet {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range k.Episodes {
		if e.Key == "" || e.UID == "" || e.Written == "" || e.Attempts < 1 || e.Start.IsZero() ||
			e.Start.After(e.Seen) || e.Seen.After(now.Add(keptSkew)) || len(s.kept) >= MaxKeptOverwrites {
			continue
		}
		if _, ok := s.lastWritten[e.Key]; ok {
			continue // this term's own knowledge wins
		}
		e.Seen = earlier(e.Seen, now)
		e.Start = earlier(e.Start, e.Seen)
		if now.Sub(e.Seen) > overwriteQuiet {
			continue
		}
		e.Next = earlier(e.Next, now.Add(overwriteSlow))
		s.kept[e.Key] = e
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

// takeKept is the ingress last written for key according to the previous holder's episode,
// when that episode is believed: the same Service, the ingress it wants now is the one
// written, its status shows something else, seen within overwriteQuiet. The episode then
// goes on as this term's. The kept entry is used once, believed or not. It expects mu held.
func (s *State) takeKept(key string, uid types.UID, status, desired []v1.LoadBalancerIngress, now time.Time) ([]v1.LoadBalancerIngress, bool) {
	k, ok := s.kept[key]
	if !ok {
		return nil, false
	}
	delete(s.kept, key)
	s.signalOverwrites()
	if k.UID != uid || IngressHash(desired) != k.Written || IngressHash(status) == k.Written || now.Sub(k.Seen) > overwriteQuiet {
		return nil, false
	}
	last := slices.Clone(desired)
	s.lastWritten[key] = last
	s.overwrites[key] = &overwriteEpisode{uid: uid, attempts: k.Attempts, start: k.Start, seen: k.Seen, next: k.Next}
	return last, true
}
