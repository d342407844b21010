package handover

import (
	"strings"
	"testing"
	"time"
)

func TestReadAndPhases(t *testing.T) {
	old := `{"level":"info","ts":"2026-11-28T10:00:00.000Z","msg":"Started leading"}
not json
{"level":"info","ts":"2026-11-28T10:00:05.010Z","msg":"Received signal, shutting down"}
{"level":"info","ts":"2026-11-28T10:00:05.030Z","msg":"Writes fenced, releasing the Lease","drained":"20ms"}
{"level":"info","ts":"2026-11-28T10:00:05.036Z","msg":"Released the Lease"}
{"level":"info","ts":"2026-11-28T10:00:05.050Z","msg":"Stopped"}
`
	// A kubectl --timestamps prefix before the object is skipped.
	standby := `2026-11-28T10:00:05.040000Z {"level":"info","ts":"2026-11-28T10:00:05.040Z","msg":"Started leading"}
{"level":"info","ts":"2026-11-28T10:00:05.120Z","msg":"Controllers synced, writing"}
{"level":"info","ts":"2026-11-28T10:00:09.000Z","msg":"Controllers synced, writing"}
`
	from := time.Date(2026, 11, 28, 10, 0, 5, 0, time.UTC)
	p := Phases{Old: Read(strings.NewReader(old), from), New: Read(strings.NewReader(standby), from)}
	if !p.Old.StartedLeading.IsZero() {
		t.Errorf("the old leader's own start before from was kept: %v", p.Old.StartedLeading)
	}
	d, ok := p.WithoutWriter()
	if !ok || d != 90*time.Millisecond {
		t.Fatalf("WithoutWriter = %v, %v; want 90ms (fenced .030 -> synced .120)", d, ok)
	}
	got := p.String(from, "delete")
	for _, want := range []string{"time without a writer 0.090s", "SIGTERM 0.010s", "fenced 0.030s", "released its Lease 0.036s", "standby leading 0.040s", "standby synced 0.120s", "stopped 0.050s"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if _, ok := (Phases{Old: p.Old}).WithoutWriter(); ok {
		t.Error("WithoutWriter is ok without the standby's log")
	}
	if s := (Phases{}).String(from, "delete"); !strings.Contains(s, "? (a phase is missing") {
		t.Errorf("missing phases not shown: %q", s)
	}
}
