package testenv

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAuditEventIdentity(t *testing.T) {
	for _, tc := range []struct{ ua, want string }{
		{"endpoints-controller/v0.1.0 (linux/amd64) kcm-split/node-1_6f1c2a", "node-1_6f1c2a"},
		// A version or binary holding the marker's words does not confuse it: the last one counts.
		{"kcm-split/v1 (linux/amd64) kcm-split/a kcm-split/h_1", "h_1"},
		{"endpoints-controller/v0.1.0 (linux/amd64) kcm-split", ""},
		{"kubectl/v1.36.3 (linux/amd64) kubernetes/abcdef", ""},
		{"", ""},
	} {
		if got := (AuditEvent{UserAgent: tc.ua}).Identity(); got != tc.want {
			t.Errorf("Identity(%q) = %q, want %q", tc.ua, got, tc.want)
		}
	}
	if ByIdentity("")(AuditEvent{UserAgent: "x/v1 (linux/amd64) kcm-split"}) {
		t.Error(`ByIdentity("") kept an event without an identity`)
	}
}

func TestAuditEventSucceeded(t *testing.T) {
	for code, want := range map[int]bool{200: true, 201: true, 299: true, 0: false, 199: false, 300: false, 403: false, 409: false, 500: false} {
		var ev AuditEvent
		ev.ResponseStatus.Code = code
		if ev.Succeeded() != want {
			t.Errorf("Succeeded() with code %d = %v, want %v", code, !want, want)
		}
	}
}

// Two replicas of one binary differ only in the identity at the end of their user agents: the
// audit log tells their writes apart, with when each was received and how it ended.
func TestAuditTellsReplicasApart(t *testing.T) {
	Require(t, env)
	ctx := context.Background()
	ns := env.Namespace(t)
	const (
		uaA = "testenv-replica/v0 (linux/amd64) kcm-split/host_aaaa"
		uaB = "testenv-replica/v0 (linux/amd64) kcm-split/host_bbbb"
	)
	a, b := env.ClientAs(t, uaA), env.ClientAs(t, uaB)
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}

	beforeA := time.Now()
	if _, err := a.CoreV1().ConfigMaps(ns).Create(ctx, cm("a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The apiserver timestamps in microseconds; keep the two sides of T apart.
	time.Sleep(10 * time.Millisecond)
	t0 := time.Now()
	if _, err := b.CoreV1().ConfigMaps(ns).Create(ctx, cm("b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CoreV1().ConfigMaps(ns).Create(ctx, cm("a"), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create of a: %v, want AlreadyExists", err)
	}
	if err := a.CoreV1().ConfigMaps(ns).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	inNS := func(ev AuditEvent) bool { return ev.ObjectRef.Namespace == ns }
	byAgent, err := env.WritesByAgent(inNS)
	if err != nil {
		t.Fatal(err)
	}
	if len(byAgent) != 2 || len(byAgent[uaA]) != 2 || len(byAgent[uaB]) != 2 {
		t.Fatalf("writes by agent = %v, want 2 of %s and 2 of %s", byAgent, uaA, uaB)
	}
	for _, ev := range byAgent[uaA] {
		if ev.Identity() != "host_aaaa" || ev.AuditID == "" || ev.RequestURI == "" {
			t.Errorf("event %+v: want identity host_aaaa, an audit ID and a request URI", ev)
		}
		if ev.RequestReceivedTimestamp.Before(beforeA.Add(-time.Second)) || ev.StageTimestamp.Before(ev.RequestReceivedTimestamp) {
			t.Errorf("event %s %s: received %s, answered %s, want after %s and in order", ev.Verb, ev.ObjectRef.Name, ev.RequestReceivedTimestamp, ev.StageTimestamp, beforeA)
		}
	}
	if d := byAgent[uaA][1]; d.Verb != "delete" || d.ObjectRef.Resource != "configmaps" || d.ObjectRef.Name != "b" || d.ResponseStatus.Code != 200 {
		t.Errorf("A's second write = %s %s/%s %d, want the delete of configmaps b, 200", d.Verb, d.ObjectRef.Resource, d.ObjectRef.Name, d.ResponseStatus.Code)
	}

	// "B wrote successfully after T": the create of b; the refused create of a is not counted.
	got, err := env.Writes(ByIdentity("host_bbbb"), ReceivedAfter(t0), AuditEvent.Succeeded, inNS)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Verb != "create" || got[0].ObjectRef.Name != "b" || got[0].ResponseStatus.Code != 201 {
		t.Fatalf("B's successful writes after T = %+v, want the create of b alone", got)
	}
	// "A wrote nothing after T but its delete", and ByUserAgent matches the whole agent only.
	got, err = env.Writes(ByUserAgent(uaA), ReceivedAfter(t0), inNS)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Verb != "delete" {
		t.Fatalf("A's writes after T = %+v, want the delete alone", got)
	}
	if got, _ := env.Writes(ByUserAgent("testenv-replica/v0"), inNS); len(got) != 0 {
		t.Fatalf("ByUserAgent matched a prefix: %+v", got)
	}
}

// TestReadAuditFiles reads a rotated log as the apiserver leaves it: two backups (one gzipped,
// one being compressed: plain and a partial .gz side by side), the current file with a torn
// last line, and files of the directory that are not backups.
func TestReadAuditFiles(t *testing.T) {
	dir := t.TempDir()
	line := func(id string) string {
		return `{"auditID":"` + id + `","verb":"update","objectRef":{"resource":"pods","namespace":"a","name":"p"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-01-01T00:00:00.000001Z"}` + "\n"
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	gz := func(text string) string {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write([]byte(text)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	// Oldest, compressed.
	write("audit-2026-01-01T10-00-00.000.log.gz", gz(line("1")+line("2")))
	// Being compressed: the plain file is whole, the .gz a torn prefix.
	write("audit-2026-01-01T11-00-00.000.log", line("3"))
	write("audit-2026-01-01T11-00-00.000.log.gz", gz(line("3"))[:10])
	write("audit.log", line("4")+line("5")+`{"auditID":"6","verb":"upd`)
	write("audit-policy.yaml", "rules: []\n")
	write("audit-old.log", line("x"))
	write("other-2026-01-01T09-00-00.000.log", line("y"))

	evs, err := ReadAuditFiles[AuditEvent](filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ev := range evs {
		ids = append(ids, ev.AuditID)
	}
	if want := []string{"1", "2", "3", "4", "5"}; !slices.Equal(ids, want) {
		t.Errorf("read %v, want %v (backups oldest first, then the current file)", ids, want)
	}
	if got := Filter(evs, func(ev AuditEvent) bool { return ev.AuditID > "3" }, nil); len(got) != 2 {
		t.Errorf("Filter kept %d events, want 2", len(got))
	}
	if _, err := ReadAuditFiles[AuditEvent](filepath.Join(dir, "missing.log")); err == nil {
		t.Error("a missing log read without an error")
	}
}
