// Package handover reads a handover's phases from the json logs of the two processes (the
// old leader's and the standby's) and prints them, for the end-to-end tests and the
// integration tests: SIGTERM received -> the old leader's writes fenced -> its Lease released
// -> the standby leading -> the standby synced (it may write) -> the old process stopped. The
// time without a writer is from the fence's closing to the standby's sync (shared/README.md,
// "Handover"). Both logs must come from one machine's clock.
package handover

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kcm-split/kcm-split/shared/leader"
)

// Log messages read here besides leader's: shared/app's first and last lines of a shutdown.
const (
	msgSignal  = "Received signal, shutting down"
	msgStopped = "Stopped"
)

// Times are when one process logged each message of a handover (zero: not in the log).
type Times struct {
	Signal, Fenced, Released, Stopped time.Time // the old leader's
	StartedLeading, Synced            time.Time // the standby's
}

// tsLayout is the json format's "ts" (zap's ISO 8601 encoder).
const tsLayout = "2006-01-02T15:04:05.000Z0700"

// Read scans a json log (one object a line; other lines are skipped) and keeps the first time
// each handover message was logged, from onwards (zero: from the start). Pass the time the
// handover was set off, so that a process's earlier terms are not taken for this one.
func Read(r io.Reader, from time.Time) Times {
	var t Times
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var l struct {
			TS  string `json:"ts"`
			Msg string `json:"msg"`
		}
		line := sc.Bytes()
		if i := strings.IndexByte(string(line), '{'); i > 0 {
			line = line[i:] // a timestamp or a prefix before the object
		}
		if json.Unmarshal(line, &l) != nil {
			continue
		}
		at, err := time.Parse(tsLayout, l.TS)
		if err != nil || at.Before(from.Truncate(time.Millisecond)) {
			continue
		}
		var slot *time.Time
		switch l.Msg {
		case msgSignal:
			slot = &t.Signal
		case leader.MsgFenced:
			slot = &t.Fenced
		case leader.MsgReleased:
			slot = &t.Released
		case msgStopped:
			slot = &t.Stopped
		case leader.MsgStartedLeading:
			slot = &t.StartedLeading
		case leader.MsgSynced:
			slot = &t.Synced
		}
		if slot != nil && slot.IsZero() {
			*slot = at
		}
	}
	return t
}

// Phases are one handover read from both logs.
type Phases struct {
	Old, New Times
}

// WithoutWriter is the standby's sync minus the old leader's fence; ok is false when either
// is missing from its log.
func (p Phases) WithoutWriter() (d time.Duration, ok bool) {
	if p.Old.Fenced.IsZero() || p.New.Synced.IsZero() {
		return 0, false
	}
	return p.New.Synced.Sub(p.Old.Fenced), true
}

// String prints the phases relative to start (the Pod's deletion or the SIGTERM, as seen by
// the caller on the same machine), then the time without a writer. A phase missing from its
// log is "?".
func (p Phases) String(start time.Time, startName string) string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "?"
		}
		return fmt.Sprintf("%.3fs", t.Sub(start).Seconds())
	}
	without := "? (a phase is missing from the logs)"
	if d, ok := p.WithoutWriter(); ok {
		without = fmt.Sprintf("%.3fs", d.Seconds())
	}
	return fmt.Sprintf("time without a writer %s (old leader fenced -> standby synced); after the %s: old leader got SIGTERM %s, fenced %s, released its Lease %s, standby leading %s, standby synced %s, old process stopped %s",
		without, startName, at(p.Old.Signal), at(p.Old.Fenced), at(p.Old.Released), at(p.New.StartedLeading), at(p.New.Synced), at(p.Old.Stopped))
}
