package kubeadm

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/deploy/tests/drills/handover"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// A binary's log as the chart runs it (JSON), its take-over lines as shared/app/takeover logs them.
const podLog = `{"level":"info","ts":"2026-11-28T08:00:21.456Z","logger":"endpoints-controller","caller":"takeover/takeover.go:83","msg":"Take-over: waiting for proof that kube-controller-manager runs none of the controllers","v":0,"reason":"Pod kube-system/kube-controller-manager-n runs endpoints-controller (--controllers=*)"}
{"level":"info","ts":"2026-11-28T08:00:21.868Z","logger":"endpoints-controller","caller":"takeover/takeover.go:79","msg":"Take-over: kube-controller-manager runs none of the controllers; starting them","v":0,"proof":"kube-controller-manager's Lease, held by \"vm_1\", expired"}
not json
{"level":"info","ts":"2026-11-28T08:00:30.000Z","logger":"endpoints-controller","msg":"Starting"}
{"level":"info","ts":"2026-11-28T08:01:43.444+0000","logger":"endpoints-controller","caller":"takeover/takeover.go:122","msg":"Take-over: kube-controller-manager may run the controllers again; stopping them","v":0,"reason":"Pod kube-system/kube-controller-manager-n runs endpoints-controller (--controllers=*)"}
{"level":"info","ts":"2026-11-28T08:02:10.001Z","logger":"endpoints-controller","msg":"Take-over: kube-controller-manager runs none of the controllers; starting them","proof":"p2"}
`

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, "2026-11-28T"+s+"Z")
	if err != nil {
		panic(err)
	}
	return t
}

func TestTakeOverEventsAndOurTerms(t *testing.T) {
	evs, err := TakeOverEvents("p", strings.NewReader(podLog))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("events %+v, want 3", evs)
	}
	if e := evs[0]; e.Binary != "endpoints-controller" || e.Pod != "p" || !e.Start || !e.At.Equal(at("08:00:21.868")) || !strings.Contains(e.Why, "expired") {
		t.Errorf("first event %+v", e)
	}
	if e := evs[1]; e.Start || !e.At.Equal(at("08:01:43.444")) || !strings.Contains(e.Why, "runs endpoints-controller") {
		t.Errorf("second event %+v", e)
	}
	terms := OurTerms(evs)["p"]
	want := []handover.Term{{From: at("08:00:21.868"), To: at("08:01:44.444")}, {From: at("08:02:10.001")}}
	if len(terms) != 2 || !sameTerm(terms[0], want[0]) || !sameTerm(terms[1], want[1]) {
		t.Errorf("terms %v, want %v (the stop's term ends inFlight later; the last is open)", terms, want)
	}
	if _, err := TakeOverEvents("p", strings.NewReader(`{"ts":"bad","msg":"`+msgStarting+`"}`)); err == nil {
		t.Error("a bad time stamp: no error")
	}
}

func sameTerm(a, b handover.Term) bool { return a.From.Equal(b.From) && a.To.Equal(b.To) }

func lease(holder string, acquired, renewed time.Time) *coordinationv1.Lease {
	d := int32(15)
	return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d,
		AcquireTime: &metav1.MicroTime{Time: acquired}, RenewTime: &metav1.MicroTime{Time: renewed}}}
}

func TestKCMTerms(t *testing.T) {
	var l LeaseLog
	t0 := at("08:00:00")
	// Process a leads and renews every 2 s; it is stopped after its renewal at 6 s; b takes the
	// Lease once it expired and still leads.
	for s := 0; s <= 6; s += 2 {
		l.Observe(lease("vm_a", t0.Add(-time.Minute), t0.Add(time.Duration(s)*time.Second)))
	}
	l.Observe(lease("vm_b", t0.Add(25*time.Second), t0.Add(25*time.Second)))
	l.Observe(lease("vm_b", t0.Add(25*time.Second), t0.Add(27*time.Second)))
	l.Observe(&coordinationv1.Lease{}) // no holder: nothing
	got := l.KCMTerms()
	if len(got) != 2 {
		t.Fatalf("terms %+v", got)
	}
	if got[0].ID != "vm_a" || !got[0].From.Equal(t0.Add(-time.Minute)) || !got[0].To.Equal(t0.Add(21*time.Second)) {
		t.Errorf("a's term %s %v: want from its acquisition to its last renewal plus 15 s", got[0].ID, got[0].Term)
	}
	if got[1].ID != "vm_b" || !got[1].From.Equal(t0.Add(25*time.Second)) || !got[1].To.IsZero() {
		t.Errorf("b's term %s %v: want open from its acquisition", got[1].ID, got[1].Term)
	}
	acq := l.Acquired()
	if len(acq) != 2 || acq[1].ID != "vm_b" || !acq[1].From.Equal(t0.Add(25*time.Second)) {
		t.Errorf("Acquired %+v", acq)
	}
}

func TestPersistsLeavesOutReviews(t *testing.T) {
	ev := func(group, resource string) testenv.AuditEvent {
		var e testenv.AuditEvent
		e.ObjectRef.APIGroup, e.ObjectRef.Resource = group, resource
		return e
	}
	for _, tc := range []struct {
		ev   testenv.AuditEvent
		want bool
	}{
		{ev("authentication.k8s.io", "tokenreviews"), false},
		{ev("authorization.k8s.io", "subjectaccessreviews"), false},
		{ev("", "endpoints"), true},
		{ev("discovery.k8s.io", "endpointslices"), true},
	} {
		if got := persists(tc.ev); got != tc.want {
			t.Errorf("persists(%s/%s) = %v, want %v", tc.ev.ObjectRef.APIGroup, tc.ev.ObjectRef.Resource, got, tc.want)
		}
	}
}
