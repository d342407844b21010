package testenv

import (
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
