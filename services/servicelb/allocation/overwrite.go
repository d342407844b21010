// Overwrite backoff: a decision of its own (it takes mu).

package allocation

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Overwrite backoff: when the status the controller wrote is changed by someone else, it
// is put back at once, then after overwriteBase, doubling, and after overwriteMaxAttempts
// writes only every overwriteSlow. An episode ends after overwriteQuiet without an
// overwrite.
const (
	overwriteBase        = 5 * time.Second
	overwriteMaxAttempts = 5
	overwriteSlow        = 5 * time.Minute
	overwriteQuiet       = 10 * time.Minute
)

// overwriteEpisode is one Service's run of overwrites by another writer.
type overwriteEpisode struct {
	uid      types.UID // the Service's, for the next Lease holder (overwritekeep.go)
	attempts int
	start    time.Time // the first overwrite seen
	seen     time.Time // last time an overwrite was seen
	next     time.Time // no write before
}

// OverwriteBackoff decides whether desired may be written for key (the Service of UID uid)
// at now, when status (the Service's current ingress) is not what the controller last wrote
// although it still wants the same: someone else changed it. It returns how long to wait (0:
// write now), whether a new episode began, and whether this is a write against an overwrite
// (to be counted). Reading the episode and moving it on are one step under mu. With nothing
// written for key yet in this term, an episode kept by the previous Lease holder
// (ResumeOverwrites) stands for what was written, if it matches the Service now.
func (s *State) OverwriteBackoff(key string, uid types.UID, status, desired []v1.LoadBalancerIngress, now time.Time) (wait time.Duration, newEpisode, rewrite bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, ok := s.lastWritten[key]
	if !ok {
		last, ok = s.takeKept(key, uid, status, desired, now)
	}
	if !ok || !IngressEqual(last, desired) || IngressEqual(status, last) {
		return 0, false, false
	}
	e := s.overwrites[key]
	if e == nil || now.Sub(e.seen) > overwriteQuiet {
		e = &overwriteEpisode{start: now}
		s.overwrites[key] = e
		newEpisode = true
	}
	e.uid = uid
	e.seen = now
	if now.Before(e.next) {
		if newEpisode {
			s.signalOverwrites()
		}
		return e.next.Sub(now), newEpisode, false
	}
	e.attempts++
	delay := overwriteSlow
	if e.attempts < overwriteMaxAttempts {
		delay = overwriteBase << (e.attempts - 1)
	}
	e.next = now.Add(delay)
	s.signalOverwrites()
	return 0, newEpisode, true
}
