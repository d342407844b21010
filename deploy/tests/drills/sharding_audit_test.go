package drills

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// shardAuditPolicy records every write at Metadata level, as testenv's default does, except
// writes of Leases, recorded at Request level: their body says who took or gave up the Lease
// (spec.holderIdentity, empty on a release), which is what bounds each process's terms.
const shardAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  verbs: ["create", "update", "patch"]
  resources: [{group: "coordination.k8s.io", resources: ["leases"]}]
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// drillEvent is an audit event with, for a Lease write, the holder it writes.
type drillEvent struct {
	testenv.AuditEvent
	RequestObject *struct {
		Spec struct {
			HolderIdentity *string `json:"holderIdentity"`
		} `json:"spec"`
	} `json:"requestObject"`
}

// leaderAgentSuffix ends the user agent of a kcm-split process's leader-election client
// (shared/app's leaderClient): its identity is what precedes it.
const leaderAgentSuffix = "/leader-election"

// readAudit reads the whole audit log of e, Lease holders included (Env.Audit's events keep the
// request bodies out), ordered by completion.
func readAudit(e *testenv.Env) ([]drillEvent, error) {
	out, err := testenv.ReadAudit[drillEvent](e)
	slices.SortStableFunc(out, func(a, b drillEvent) int { return a.StageTimestamp.Compare(b.StageTimestamp) })
	return out, err
}

// term is one stretch during which a process held its Lease: from the request that took it
// (received) to the one that gave it up (completed), or, for a process that gave nothing up,
// to a lease duration after its last renewal (still running: open, to is zero).
type term struct {
	lease    string
	from, to time.Time
	released bool
}

func (tm term) covers(t time.Time) bool {
	return !t.Before(tm.from) && (tm.to.IsZero() || !t.After(tm.to))
}

func (tm term) overlaps(o term) bool {
	return (o.to.IsZero() || !tm.from.After(o.to)) && (tm.to.IsZero() || !o.from.After(tm.to))
}

// leaseTerms reads every process's terms off the successful Lease writes of its
// leader-election client. exited says whether a process has exited (a term it did not give
// up then ends a lease duration after its last renewal).
func leaseTerms(evs []drillEvent, leaseDuration time.Duration, exited func(id string) bool) map[string][]term {
	out := map[string][]term{}
	last := map[string]time.Time{}
	for _, ev := range evs {
		if ev.ObjectRef.Resource != "leases" || !ev.Succeeded() || ev.RequestObject == nil || ev.RequestObject.Spec.HolderIdentity == nil {
			continue
		}
		id, ok := strings.CutSuffix(ev.Identity(), leaderAgentSuffix)
		if !ok {
			continue
		}
		holder := *ev.RequestObject.Spec.HolderIdentity
		ts := out[id]
		open := len(ts) > 0 && ts[len(ts)-1].to.IsZero()
		switch {
		case holder == id && !open:
			out[id] = append(ts, term{lease: ev.ObjectRef.Name, from: ev.RequestReceivedTimestamp})
			last[id] = ev.StageTimestamp
		case holder == id:
			last[id] = ev.StageTimestamp
		case holder == "" && open:
			ts[len(ts)-1].to, ts[len(ts)-1].released = ev.StageTimestamp, true
		}
	}
	for id, ts := range out {
		if n := len(ts); ts[n-1].to.IsZero() && exited(id) {
			ts[n-1].to = last[id].Add(leaseDuration)
		}
	}
	return out
}

// sliceService is the Service an EndpointSlice was generated for: its name is the Service's
// and "-" and five random characters (generateName).
func sliceService(name string) string {
	if n := len(name); n > 6 && name[n-6] == '-' {
		return name[:n-6]
	}
	return name
}

// serviceLives returns, per "namespace/name", the stretches during which the Service
// surely existed: from its create (completed) to its delete (received).
func serviceLives(evs []drillEvent) map[string][][2]time.Time {
	out := map[string][][2]time.Time{}
	for _, ev := range evs {
		if ev.ObjectRef.Resource != "services" || ev.ObjectRef.Subresource != "" || !ev.Succeeded() || ev.Identity() != "" {
			continue
		}
		key := ev.ObjectRef.Namespace + "/" + ev.ObjectRef.Name
		switch ev.Verb {
		case "create":
			out[key] = append(out[key], [2]time.Time{ev.StageTimestamp, {}})
		case "delete":
			if lives := out[key]; len(lives) > 0 && lives[len(lives)-1][1].IsZero() {
				lives[len(lives)-1][1] = ev.RequestReceivedTimestamp
			}
		}
	}
	return out
}

func alive(lives [][2]time.Time, t time.Time) bool {
	for _, l := range lives {
		if !t.Before(l[0]) && (l[1].IsZero() || t.Before(l[1])) {
			return true
		}
	}
	return false
}

// span formats a duration for DRILL lines.
func span(d time.Duration) string { return d.Round(time.Millisecond).String() }

// minMax is "a" or "a to b".
func minMax(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	lo, hi := slices.Min(ds), slices.Max(ds)
	if lo.Round(time.Millisecond) == hi.Round(time.Millisecond) {
		return span(lo)
	}
	return fmt.Sprintf("%s to %s", span(lo), span(hi))
}
