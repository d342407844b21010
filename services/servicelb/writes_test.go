package servicelb

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/shared/worker"
)

// Rule 3: a status someone else keeps changing is restored with exponential backoff, capped,
// then slowly; one Event per episode; every restoring write counted.
func TestOverwrittenStatusBacksOff(t *testing.T) {
	f := newFixture(t, testOptions(), lb("web", withFinalizer()))
	f.pool("p", []string{"192.0.2.10-192.0.2.20"})
	f.c.restore(context.Background())
	now := time.Unix(1000, 0)
	f.c.now = func() time.Time { return now }
	if err := f.sync("web"); err != nil {
		t.Fatal(err)
	}
	f.events()
	rv := 1
	overwrite := func() {
		rv++
		s := f.stored("web")
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "203.0.113.9"}}
		s.ResourceVersion = strings.Repeat("9", rv) // a new version each time
		if err := f.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("services"), s, testNS); err != nil {
			t.Fatal(err)
		}
		f.cache(s)
	}
	// The other writer overwrites at once after every write of ours; we sync every second
	// for ten minutes (the queue would bring the key back by the update and RequeueAfter).
	var writesAt []time.Duration
	start := now
	events := 0
	for now.Sub(start) < 10*time.Minute {
		if got := ips(f.stored("web")); !slices.Equal(got, []string{"203.0.113.9"}) {
			overwrite()
		}
		err := f.sync("web")
		var rq *worker.Requeue
		if err != nil && !errors.As(err, &rq) {
			t.Fatal(err)
		}
		if slices.Contains(f.writes(), "patch web/status") {
			writesAt = append(writesAt, now.Sub(start))
		}
		events += countReason(f.events(), ReasonStatusOverwritten)
		now = now.Add(time.Second)
	}
	t.Logf("restoring writes at %v", writesAt)
	if events != 1 {
		t.Fatalf("%d %s events, want 1 per episode", events, ReasonStatusOverwritten)
	}
	perMinute := 0
	for _, w := range writesAt {
		if w < time.Minute {
			perMinute++
		}
	}
	if perMinute > 4 {
		t.Fatalf("%d restoring writes in the first minute, want at most 4", perMinute)
	}
	// After the cap: one write per 5 minutes.
	late := 0
	for _, w := range writesAt {
		if w >= 5*time.Minute {
			late++
		}
	}
	if late > 1 {
		t.Fatalf("%d writes in the last 5 minutes, want at most 1 (slow path)", late)
	}
	if v := testutil.ToFloat64(f.c.metrics.conflicts.WithLabelValues(conflictOverwritten)); int(v) != len(writesAt) {
		t.Fatalf("overwritten counter %v, restoring writes %d", v, len(writesAt))
	}
	// Quiet for longer than an episode lasts (10 minutes): a new overwrite is a new episode.
	now = now.Add(11 * time.Minute)
	_ = f.sync("web") // restores, the other writer has stopped
	overwrite()
	_ = f.sync("web")
	if n := countReason(f.events(), ReasonStatusOverwritten); n != 1 {
		t.Fatalf("%d events for a new episode, want 1", n)
	}
}
