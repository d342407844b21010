package testenv

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// identityMarker precedes the leader-election identity at the end of a kcm-split binary's user
// agent: "<id>/<version> (<os>/<arch>) kcm-split/<identity>".
const identityMarker = " kcm-split/"

// Identity is the leader-election identity ("<hostname>_<uuid>") at the end of the event's
// user agent, or "" when the client is not a kcm-split binary that sends one.
func (ev AuditEvent) Identity() string {
	i := strings.LastIndex(ev.UserAgent, identityMarker)
	if i < 0 {
		return ""
	}
	return ev.UserAgent[i+len(identityMarker):]
}

// Succeeded reports whether the request succeeded (a 2xx response): a write that changed, or
// would have changed, something. AuditEvent.Succeeded is itself a filter for Writes and Audit:
//
//	env.Writes(testenv.ByIdentity(id), testenv.ReceivedAfter(t0), testenv.AuditEvent.Succeeded)
func (ev AuditEvent) Succeeded() bool {
	return ev.ResponseStatus.Code >= 200 && ev.ResponseStatus.Code < 300
}

// ByUserAgent keeps events whose user agent is exactly ua: one process of a kcm-split binary
// (its user agent ends with its identity).
func ByUserAgent(ua string) func(AuditEvent) bool {
	return func(ev AuditEvent) bool { return ev.UserAgent == ua }
}

// ByIdentity keeps events of the kcm-split process with leader-election identity id
// (Controller.Identity, LeaseRecord.Holder), whatever its binary and version.
func ByIdentity(id string) func(AuditEvent) bool {
	return func(ev AuditEvent) bool { return id != "" && ev.Identity() == id }
}

// ReceivedAfter keeps events the apiserver received strictly after t. Clock of this machine:
// the apiserver runs on it.
func ReceivedAfter(t time.Time) func(AuditEvent) bool {
	return func(ev AuditEvent) bool { return ev.RequestReceivedTimestamp.After(t) }
}

// GroupByUserAgent groups events by user agent, keeping their order: with each process's
// identity in its user agent, one group per process.
func GroupByUserAgent(evs []AuditEvent) map[string][]AuditEvent {
	out := map[string][]AuditEvent{}
	for _, ev := range evs {
		out[ev.UserAgent] = append(out[ev.UserAgent], ev)
	}
	return out
}

// WritesByAgent is Writes grouped by user agent (GroupByUserAgent), to tell replicas apart:
// "which processes wrote, and what".
func (env *Env) WritesByAgent(keep ...func(AuditEvent) bool) (map[string][]AuditEvent, error) {
	evs, err := env.Writes(keep...)
	if err != nil {
		return nil, err
	}
	return GroupByUserAgent(evs), nil
}

// all reports whether every non-nil filter keeps ev.
func all(ev AuditEvent, keep []func(AuditEvent) bool) bool {
	for _, k := range keep {
		if k != nil && !k(ev) {
			return false
		}
	}
	return true
}

// Filter returns the events every filter keeps (a nil filter keeps all), in their order: Writes
// and Audit on an audit log read some other way (ReadAuditFiles).
func Filter(evs []AuditEvent, keep ...func(AuditEvent) bool) []AuditEvent {
	var out []AuditEvent
	for _, ev := range evs {
		if all(ev, keep) {
			out = append(out, ev)
		}
	}
	return out
}

// backupTimeFormat is the timestamp the apiserver's log rotation (lumberjack) puts in a
// backup's name: audit.log becomes audit-2006-01-02T15-04-05.000.log, then .log.gz if the
// apiserver compresses backups (--audit-log-compress).
const backupTimeFormat = "2006-01-02T15-04-05.000"

// auditBackup is one rotated file of an audit log.
type auditBackup struct {
	path    string
	rotated time.Time
}

// auditBackups lists the rotated backups of the audit log at path, oldest first. A backup
// present both plain and compressed is being compressed: the plain one is read (the other may
// be partial).
func auditBackups(path string) ([]auditBackup, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + "-"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	byStamp := map[string]auditBackup{}
	for _, e := range entries {
		name := e.Name()
		plain := strings.TrimSuffix(name, ".gz")
		stamp, ok := strings.CutPrefix(plain, prefix)
		if !ok || e.IsDir() {
			continue
		}
		if stamp, ok = strings.CutSuffix(stamp, ext); !ok {
			continue
		}
		at, err := time.Parse(backupTimeFormat, stamp)
		if err != nil {
			continue // not a backup of this log (audit-policy.yaml, another log's file)
		}
		if prev, seen := byStamp[stamp]; seen && !strings.HasSuffix(prev.path, ".gz") {
			continue
		}
		byStamp[stamp] = auditBackup{path: filepath.Join(dir, name), rotated: at}
	}
	out := make([]auditBackup, 0, len(byStamp))
	for _, b := range byStamp {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b auditBackup) int { return a.rotated.Compare(b.rotated) })
	return out, nil
}

// ReadAuditFiles decodes every event of the JSON-lines audit log at path (the apiserver's
// --audit-log-path, e.g. kubeadm's /var/log/kubernetes/audit/audit.log) into a T, its rotated
// backups first (oldest first, gzipped ones too), in the log's order. T is AuditEvent or a type
// embedding it (see ReadAudit). A line that does not decode is skipped: the one the apiserver
// is writing may be torn. A rotation during the read (a backup appearing or going) makes it
// read again, a few times at most.
func ReadAuditFiles[T any](path string) ([]T, error) {
	var lastErr error
	for attempt := range 5 {
		if attempt > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		before, err := auditBackups(path)
		if err != nil {
			return nil, err
		}
		var out []T
		for _, b := range before {
			if out, err = appendAuditFile(out, b.path); err != nil {
				break
			}
		}
		if err == nil {
			out, err = appendAuditFile(out, path)
		}
		after, lerr := auditBackups(path)
		if lerr != nil {
			return nil, lerr
		}
		if err == nil && slices.EqualFunc(before, after, func(a, b auditBackup) bool { return a.path == b.path }) {
			return out, nil
		}
		lastErr = err
		if lastErr == nil {
			lastErr = fmt.Errorf("%s: rotated while being read", path)
		}
	}
	return nil, lastErr
}

// appendAuditFile decodes one file of an audit log (gzipped if its name ends with .gz).
func appendAuditFile[T any](out []T, path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return out, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return out, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev T
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
