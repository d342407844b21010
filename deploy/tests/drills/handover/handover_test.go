package handover

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// t0 is the start of every synthetic log; at(s) is s seconds after it.
var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// Writers of the synthetic logs, as a kubeadm cluster's apiserver records them.
var (
	kcmEndpoints = writer{user: "system:serviceaccount:kube-system:endpoint-controller",
		ua: "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/8f3e2a1/system:serviceaccount:kube-system:endpoint-controller"}
	kcmLeader = writer{user: "system:kube-controller-manager",
		ua: "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/8f3e2a1/leader-election"}
	ours = writer{user: "system:serviceaccount:kcm-split:kcm-split-endpoints",
		ua: "endpoints-controller/v0.1.0 (linux/amd64) kcm-split/node-1_6f1c2a"}
	oursLeader = writer{user: ours.user, ua: ours.ua + "/leader-election"}
)

type writer struct{ user, ua string }

// line is one audit event as kube-apiserver writes it at level Metadata.
func line(w writer, verb, resource, sub, ns, name string, code int, received float64) string {
	group, version := "", "v1"
	if resource == "endpointslices" {
		group = "discovery.k8s.io"
	}
	if resource == "leases" {
		group = "coordination.k8s.io"
	}
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"%s-%g","stage":"ResponseComplete",`+
		`"requestURI":"/x","verb":"%s","user":{"username":"%s","groups":["system:authenticated"]},"sourceIPs":["10.0.0.1"],"userAgent":"%s",`+
		`"objectRef":{"resource":"%s","namespace":"%s","name":"%s","apiGroup":"%s","apiVersion":"%s","subresource":"%s"},`+
		`"responseStatus":{"metadata":{},"code":%d},"requestReceivedTimestamp":"%s","stageTimestamp":"%s"}`+"\n",
		verb, received, verb, w.user, w.ua, resource, ns, name, group, version, sub, code,
		at(received).Format(time.RFC3339Nano), at(received+0.002).Format(time.RFC3339Nano))
}

// writeLog writes lines as a rotated log: the first half in a backup, the rest in audit.log.
func writeLog(t *testing.T, lines ...string) string {
	t.Helper()
	dir := t.TempDir()
	half := len(lines) / 2
	backup := filepath.Join(dir, "audit-"+at(30).Format("2006-01-02T15-04-05.000")+".log")
	if err := os.WriteFile(backup, []byte(strings.Join(lines[:half], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines[half:], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func read(t *testing.T, path string) []testenv.AuditEvent {
	t.Helper()
	evs, err := testenv.ReadAuditFiles[testenv.AuditEvent](path)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// handoverLog is a take-over of the endpoints controller: KCM writes Endpoints web until 10 s,
// kcm-split from 12 s. Both write Endpoints web, both their Leases; kcm-split's refused write
// of other (409) and KCM's read change nothing.
func handoverLog(t *testing.T, extra ...string) string {
	return writeLog(t, append([]string{
		line(kcmEndpoints, "update", "endpoints", "", "app", "web", 200, 1),
		line(kcmEndpoints, "create", "endpointslices", "", "app", "web-abcde", 201, 2),
		line(kcmLeader, "update", "leases", "", "kube-system", "kube-controller-manager", 200, 3),
		line(kcmEndpoints, "update", "endpoints", "", "app", "web", 200, 8),
		line(kcmEndpoints, "get", "endpoints", "", "app", "other", 200, 13),
		line(oursLeader, "update", "leases", "", "kcm-split", "endpoints-controller", 200, 12),
		line(ours, "update", "endpoints", "", "app", "web", 200, 14),
		line(ours, "update", "endpoints", "", "app", "other", 409, 15),
		line(ours, "update", "endpointslices", "", "app", "web-abcde", 200, 16),
	}, extra...)...)
}

func sides(kcm, split []Term) (Side, Side) {
	return Side{Name: "KCM", Writes: KCMByServiceAccount(KCMClients...), Terms: kcm},
		Side{Name: "kcm-split", Writes: KcmSplitWrites(KcmSplitIDs...), Terms: split}
}

func TestTwoWritersFromAnAuditFile(t *testing.T) {
	evs := read(t, handoverLog(t))
	if len(evs) != 9 {
		t.Fatalf("read %d events from the rotated log, want 9", len(evs))
	}
	for _, tc := range []struct {
		name            string
		kcm, split      []Term
		want            []string
		outKCM, outOurs int
	}{
		{name: "KCM's term ends before kcm-split's begins: no two writers",
			kcm: []Term{{at(0), at(10)}}, split: []Term{{at(11), time.Time{}}}},
		{name: "kcm-split's term begins while KCM's runs: both wrote Endpoints web and its slice",
			kcm: []Term{{at(0), at(10)}}, split: []Term{{at(5), time.Time{}}},
			want: []string{"/endpoints app/web", "discovery.k8s.io/endpointslices app/web-abcde"}},
		{name: "KCM wrote after its term ended, in kcm-split's",
			kcm: []Term{{at(0), at(6)}}, split: []Term{{at(6), time.Time{}}},
			want: []string{"/endpoints app/web"}, outKCM: 1},
		{name: "kcm-split wrote before its term began (a term measured late), in no term: no pair",
			kcm: []Term{{at(0), at(10)}}, split: []Term{{at(15), time.Time{}}}, outOurs: 1},
		{name: "a gap between the terms: the writes around it do not pair",
			kcm: []Term{{at(0), at(9)}}, split: []Term{{at(13.5), at(20)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := sides(tc.kcm, tc.split)
			res := TwoWriters(evs, a, b)
			if got := res.Objects(); !slices.Equal(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Errorf("two writers %v, want %v; examples %v", got, tc.want, res.Examples(-1))
			}
			if len(res.OutOfTermA) != tc.outKCM || len(res.OutOfTermB) != tc.outOurs {
				t.Errorf("out of term: KCM %d, kcm-split %d; want %d, %d", len(res.OutOfTermA), len(res.OutOfTermB), tc.outKCM, tc.outOurs)
			}
			for _, w := range res.TwoWriters {
				if !a.Writes(w.A) || !b.Writes(w.B) || !w.TermA.Covers(w.A.RequestReceivedTimestamp) ||
					!w.TermB.Covers(w.B.RequestReceivedTimestamp) || !w.TermA.Overlaps(w.TermB) {
					t.Errorf("evidence does not show two writers: %s", w)
				}
			}
		})
	}
}

// TestTwoWritersTrap is the trap of a re-rendered manifest: KCM runs the controllers again
// (its second term) while kcm-split has not stood down yet.
func TestTwoWritersTrap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kcmLine string
		want    []string
	}{
		{"KCM writes the slice kcm-split wrote", line(kcmEndpoints, "update", "endpointslices", "", "app", "web-abcde", 200, 17),
			[]string{"discovery.k8s.io/endpointslices app/web-abcde"}},
		{"KCM's write of it is refused (a conflict): it changed nothing", line(kcmEndpoints, "update", "endpointslices", "", "app", "web-abcde", 409, 17), nil},
		{"KCM writes another object", line(kcmEndpoints, "update", "endpointslices", "", "app", "web-fghij", 200, 17), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := sides([]Term{{at(0), at(9)}, {at(15.5), time.Time{}}}, []Term{{at(13.5), at(20)}})
			res := TwoWriters(read(t, handoverLog(t, tc.kcmLine)), a, b)
			if got := res.Objects(); !slices.Equal(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Errorf("two writers %v, want %v", got, tc.want)
			}
			if len(res.OutOfTermA)+len(res.OutOfTermB) != 0 {
				t.Errorf("writes out of term: %d, %d", len(res.OutOfTermA), len(res.OutOfTermB))
			}
		})
	}
}

// TestTwoWritersEvidence checks the example names both writes and terms: a test's failure
// message is all an operator reads.
func TestTwoWritersEvidence(t *testing.T) {
	a, b := sides([]Term{{at(0), at(10)}}, []Term{{at(5), time.Time{}}})
	res := TwoWriters(read(t, handoverLog(t)), a, b)
	ex := res.Examples(1)
	if len(ex) != 1 {
		t.Fatalf("examples %v, want 1", ex)
	}
	for _, want := range []string{"/endpoints app/web", "endpoint-controller update at " + at(8).Format(time.StampMicro),
		"kcm-split-endpoints update at " + at(14).Format(time.StampMicro), "open)"} {
		if !strings.Contains(ex[0], want) {
			t.Errorf("example %q lacks %q", ex[0], want)
		}
	}
}

// TestTwoWritersSwitchPoint is the migration drill's reading: with both sides' terms the two
// sides of a switch point, two writers are the objects both wrote on one side of it.
func TestTwoWritersSwitchPoint(t *testing.T) {
	evs := read(t, handoverLog(t))
	for _, tc := range []struct {
		sw   float64
		want int
	}{{10, 0}, {13, 0}, {15, 1}, {100, 2}, {0.5, 2}} {
		halves := []Term{{at(0), at(tc.sw)}, {at(tc.sw), at(100)}}
		a, b := sides(halves, halves)
		if got := TwoWriters(evs, a, b).TwoWriters; len(got) != tc.want {
			t.Errorf("switch point at %gs: %d two writers, want %d", tc.sw, len(got), tc.want)
		}
	}
}

func TestTerm(t *testing.T) {
	open := time.Time{}
	for _, tc := range []struct {
		t    Term
		at   float64
		want bool
	}{
		{Term{at(1), at(2)}, 1, true}, {Term{at(1), at(2)}, 2, false}, {Term{at(1), at(2)}, 0.9, false},
		{Term{at(1), open}, 1e6, true}, {Term{at(1), at(1)}, 1, false},
	} {
		if got := tc.t.Covers(at(tc.at)); got != tc.want {
			t.Errorf("%s covers %gs: %v, want %v", tc.t, tc.at, got, tc.want)
		}
	}
	for _, tc := range []struct {
		a, b Term
		want bool
	}{
		{Term{at(0), at(2)}, Term{at(1), at(3)}, true},
		{Term{at(0), at(1)}, Term{at(1), at(2)}, false}, // half-open: they only touch
		{Term{at(0), open}, Term{at(5), at(6)}, true},
		{Term{at(0), open}, Term{at(5), open}, true},
		{Term{at(3), open}, Term{at(0), at(3)}, false},
		{Term{at(1), at(1)}, Term{at(1), at(1)}, false},
	} {
		if got, back := tc.a.Overlaps(tc.b), tc.b.Overlaps(tc.a); got != tc.want || back != tc.want {
			t.Errorf("%s overlaps %s: %v (and back %v), want %v", tc.a, tc.b, got, back, tc.want)
		}
	}
}

func TestFirstAndLastWrite(t *testing.T) {
	evs := read(t, handoverLog(t))
	kcm := KCMByServiceAccount(KCMClients...)
	if got, ok := FirstWrite(evs, Term{at(1.5), at(20)}, kcm); !ok || !got.Equal(at(2)) {
		t.Errorf("KCM's first write after 1.5s: %v %v, want %v", got, ok, at(2))
	}
	if got, ok := LastWrite(evs, Term{at(0), time.Time{}}, kcm); !ok || !got.Equal(at(8)) {
		t.Errorf("KCM's last write: %v %v, want %v (its read at 13s is no write)", got, ok, at(8))
	}
	ourWrites := KcmSplitWrites(KcmSplitIDs...)
	if got, ok := LastWrite(evs, Term{at(0), time.Time{}}, ourWrites); !ok || !got.Equal(at(16)) {
		t.Errorf("kcm-split's last write: %v %v, want %v (its refused one at 15s does not count)", got, ok, at(16))
	}
	if _, ok := FirstWrite(evs, Term{at(9), at(12)}, kcm); ok {
		t.Error("KCM wrote between 9s and 12s?")
	}
}

func TestWriters(t *testing.T) {
	ev := func(w writer) testenv.AuditEvent {
		var e testenv.AuditEvent
		e.User.Username, e.UserAgent = w.user, w.ua
		return e
	}
	// KCM without service account credentials: its own user, the client in its user agent.
	kcmShared := writer{user: "system:kube-controller-manager", ua: "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/8f3e2a1/node-controller"}
	for _, tc := range []struct {
		name string
		keep func(testenv.AuditEvent) bool
		w    writer
		want bool
	}{
		{"KCM by service account: its endpoints controller", KCMByServiceAccount(KCMClients...), kcmEndpoints, true},
		{"KCM by service account: its leader election", KCMByServiceAccount(KCMClients...), kcmLeader, false},
		{"KCM by service account: not a controller left out", KCMByServiceAccount("node-controller"), kcmEndpoints, false},
		{"KCM by service account: kcm-split", KCMByServiceAccount(KCMClients...), ours, false},
		{"KCM by user agent: its node controller", KCMByUserAgent(KCMClients...), kcmShared, true},
		{"KCM by user agent: its leader election", KCMByUserAgent(KCMClients...), kcmLeader, false},
		{"KCM by user agent: under service account credentials (no longer /<client>)", KCMByUserAgent(KCMClients...), kcmEndpoints, false},
		{"kcm-split writes: its endpoints controller", KcmSplitWrites(KcmSplitIDs...), ours, true},
		{"kcm-split writes: its leader election", KcmSplitWrites(KcmSplitIDs...), oursLeader, false},
		{"kcm-split requests: its leader election", KcmSplitRequests(KcmSplitIDs...), oursLeader, true},
		{"kcm-split writes: another binary's ID", KcmSplitWrites("quota-controller"), ours, false},
		{"kcm-split writes: KCM", KcmSplitWrites(KcmSplitIDs...), kcmEndpoints, false},
	} {
		if got := tc.keep(ev(tc.w)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
