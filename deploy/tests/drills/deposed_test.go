package drills

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestDeposedLeader freezes each binary's leader (SIGSTOP: a GC pause, a VM stall) while its
// controller is writing, until the standby has taken the Lease over, then thaws it. The thawed
// process must write nothing more (its writes are fenced: the audit log shows none after the
// new leader's acquire time), must not exit, and must stand by again; nothing is lost and
// nothing doubled.
// Over 80 lines: per scenario, the freeze, takeover, thaw and audit-log check must run in order against the same two processes.
func TestDeposedLeader(t *testing.T) {
	testenv.Require(t, env)
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			f := newFixture(t)
			sc.setup(f)
			args := append(append([]string{}, fastLease...), sc.args...)
			old := env.StartLeading(t, sc.bin, "old", args...)
			standby := env.Start(t, sc.bin, "standby", args...)
			oldID, standbyID := old.Identity(), standby.Identity()

			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			l := startLoad(ctx, f, sc, 0, 100*time.Millisecond)
			time.Sleep(6 * time.Second) // writes in flight

			frozeAt := time.Now()
			if err := old.Freeze(); err != nil {
				t.Fatal(err)
			}
			var lease testenv.LeaseRecord
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				lease = env.LeaseHolder(t, "kube-system", sc.bin.Lease())
				return lease.Holder == standbyID, nil
			})
			if err != nil {
				t.Fatalf("the standby did not take the Lease over from the frozen leader: %v", err)
			}
			takeover := time.Since(frozeAt)
			time.Sleep(time.Second) // the new leader writes too
			if err := old.Thaw(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second) // the thawed process's pending work, if it were not fenced
			stop()
			<-l.done
			n := int(l.last.Load())
			settle := waitSettled(t, f, sc, n, 2*time.Minute)

			// A request already past the fence when the process froze still reaches the
			// apiserver after the thaw (client-side fencing cannot recall bytes in flight): such
			// a request must have been refused by its precondition. Nothing may have landed.
			late, err := env.Writes(testenv.ByIdentity(oldID), testenv.ReceivedAfter(lease.AcquireTime))
			if err != nil {
				t.Fatal(err)
			}
			refused := 0
			for _, ev := range late {
				if !ev.Succeeded() {
					refused++
					continue
				}
				t.Errorf("deposed leader wrote after the new leader acquired at %s: %s %s %s/%s -> %d at %s",
					lease.AcquireTime.Format(time.StampMilli), ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name,
					ev.ResponseStatus.Code, ev.RequestReceivedTimestamp.Format(time.StampMilli))
			}
			before, err := env.Writes(testenv.ByIdentity(oldID))
			if err != nil {
				t.Fatal(err)
			}
			if len(before) == 0 {
				t.Fatal("test is broken: the old leader never wrote, so the drill proves nothing")
			}
			if old.Exited() {
				t.Fatalf("the deposed leader exited (%d): losing the Lease must not end the process", old.ExitCode())
			}
			// The thawed process notices and stands by: not leading, its controller stopped.
			err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				return old.Metric(`leader_election_master_status{name="`+sc.bin.Lease()+`"}`) == 0, nil
			})
			if err != nil {
				t.Fatal("the thawed process still reports itself leading")
			}
			sc.invariant(f)
			fenced := 0.0
			for _, r := range []string{"not_leading", "renewal_stale", "other_holder"} {
				if v := old.Metric(fmt.Sprintf(`kcm_split_leader_fenced_writes_total{name=%q,reason=%q}`, sc.bin.Lease(), r)); v > 0 {
					fenced += v
				}
			}
			report(t, "deposed leader", sc.name, fmt.Sprintf("takeover %s after freeze; %d steps; 0 writes landed after the takeover (%d in flight at the freeze refused by their preconditions; %d writes before); %v refused by the fence; settled %s after the load",
				takeover.Round(time.Millisecond), n+1, refused, len(before), fenced, settle.Round(time.Millisecond)))
		})
	}
}

// report logs one figure of a drill in a fixed shape, for this folder's README.md.
func report(t *testing.T, drill, controller, figures string) {
	t.Helper()
	t.Logf("DRILL %s | %s | %s", drill, controller, figures)
}
