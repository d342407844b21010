package servicelb_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcm-split/kcm-split/shared/testenv/handover"
)

// TestHandoverPhases deletes the leader the way the kubelet does (SIGTERM) while a standby runs,
// and prints where the time goes: SIGTERM -> the old leader's fence closed -> its Lease released
// -> the standby holding the Lease -> the standby synced (it may write) -> the old process gone.
// The time without a writer is from the fence's closing to the standby's sync. Timings are
// printed, not asserted (they depend on the machine); what is asserted is that the handover
// happens, in that order, and that the standby then serves a new Service.
// Over 80 lines: one scenario read from three sources (two logs and the Lease's watch) in order.
func TestHandoverPhases(t *testing.T) {
	f := setup(t)
	f.pool("main", []string{f.v4(1) + "-" + f.v4(20)})
	f.service("before")
	f.waitAddress("before")
	standby := env.Start(t, controller, "ctrl2")
	if code, _ := waitStandbyReady(standby.URL); code != http.StatusOK {
		t.Fatalf("the standby is not Ready: %d", code)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := f.c.CoordinationV1().Leases("kube-system").Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", controller.Lease()).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		records []string
		release time.Time // renewTime of the record with no holder
		acquire time.Time // acquireTime of the first record held by the standby afterwards (stamped before its read of the Lease, so it may precede the release)
	)
	go func() {
		for ev := range w.ResultChan() {
			lease, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			mu.Lock()
			holder := ""
			if lease.Spec.HolderIdentity != nil {
				holder = *lease.Spec.HolderIdentity
			}
			records = append(records, fmt.Sprintf("holder %q renewTime %s acquireTime %s", holder, lease.Spec.RenewTime.Format("15:04:05.000000"), lease.Spec.AcquireTime.Format("15:04:05.000000")))
			switch {
			case holder == "" && release.IsZero():
				release = lease.Spec.RenewTime.Time
			case holder != "" && !release.IsZero() && acquire.IsZero():
				acquire = lease.Spec.AcquireTime.Time
			}
			mu.Unlock()
		}
	}()

	sigterm := time.Now()
	exited := make(chan time.Time, 1)
	go func() {
		f.ctrl.Stop(30 * time.Second)
		exited <- time.Now()
	}()
	synced := waitLeadingSynced(t, standby.URL, controller.Lease(), time.Minute)
	exit := <-exited
	f.service("after")
	f.waitAddress("after")
	served := time.Now()
	time.Sleep(100 * time.Millisecond) // the watch's last events
	cancel()

	phases := handover.Phases{Old: readLog(t, f.ctrl.Log, sigterm), New: readLog(t, standby.Log, sigterm)}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range records {
		t.Logf("Lease: %s", r)
	}
	t.Logf("%s", phases.String(sigterm, "SIGTERM"))
	// Logged by the controller once its caches synced, as it starts its workers (also by
	// binaries older than the handover messages): for comparisons across versions.
	oldStop, newStart := firstLogged(t, f.ctrl.Log, "Shutting down service load balancer controller", sigterm), firstLogged(t, standby.Log, "Caches are synced", sigterm)
	t.Logf("the old controller shutting down -> the new one's caches synced (its workers start): %.3fs", newStart.Sub(oldStop).Seconds())
	t.Logf("from the Lease: released %.3fs, acquired %.3fs; the test saw: standby leading and Ready %.3fs, old process exited %.3fs, new Service addressed %.3fs",
		release.Sub(sigterm).Seconds(), acquire.Sub(sigterm).Seconds(), synced.Sub(sigterm).Seconds(), exit.Sub(sigterm).Seconds(), served.Sub(sigterm).Seconds())
	if _, ok := phases.WithoutWriter(); !ok {
		t.Errorf("a handover phase is missing from the logs: %+v", phases)
	}
	switch {
	case release.IsZero() || acquire.IsZero():
		t.Errorf("the Lease's watch saw no release (%v) or no acquisition after it (%v)", release, acquire)
	case phases.Old.Fenced.After(release.Truncate(time.Millisecond).Add(time.Millisecond)):
		t.Errorf("the old leader's fence closed at %s, after its release at %s", phases.Old.Fenced, release)
	}
}

func waitStandbyReady(url string) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return resp.StatusCode, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("not ready")
}

// waitLeadingSynced polls the standby every 5 ms until it leads lease and is Ready, and
// returns when it saw that.
func waitLeadingSynced(t *testing.T, url, lease string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if metricValue(url, `leader_election_master_status{name="`+lease+`"}`) == "1" {
			resp, err := http.Get(url + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return time.Now()
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the standby did not lead %s, synced, within %s", lease, timeout)
	return time.Time{}
}

func metricValue(url, series string) string {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// readLog reads a controller's json log file for a handover's times from from on.
func readLog(t *testing.T, path string, from time.Time) handover.Times {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return handover.Read(f, from)
}

// firstLogged is when the json log at path first logged msg, from from on.
func firstLogged(t *testing.T, path, msg string, from time.Time) time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if !strings.Contains(line, `"msg":"`+msg+`"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `"ts":"`)
		ts, _, _ := strings.Cut(rest, `"`)
		if at, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts); err == nil && !at.Before(from.Truncate(time.Millisecond)) {
			return at
		}
	}
	return time.Time{}
}
