package drills

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// crashLease makes each of the 20 takeovers take about two seconds.
var crashLease = []string{
	"--leader-elect-lease-duration=2s",
	"--leader-elect-renew-deadline=1500ms",
	"--leader-elect-retry-period=250ms",
}

const crashes = 20

// TestCrashDuringBursts SIGKILLs the leader of each allocating or binding controller 20 times
// while objects arrive every 50 ms, starting a new replica each time so that two always run.
// Whatever a killed leader had in flight, no range, address or volume may end up twice, and
// every object gets its allocation or binding in the end.
func TestCrashDuringBursts(t *testing.T) {
	testenv.Require(t, env)
	for _, sc := range scenarios() {
		if !slices.Contains([]string{"nodelifecycle", "servicelb", "pvbinder"}, sc.name) {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			sc.setup(f)
			args := append(append([]string{}, crashLease...), sc.args...)
			live := []*testenv.Controller{
				env.Start(t, sc.bin, "r0", args...),
				env.Start(t, sc.bin, "r1", args...),
			}
			waitOneLeader(t, sc, live, 2*time.Minute)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			l := startLoad(ctx, f, sc, 0, 50*time.Millisecond)
			var takeovers []time.Duration
			for k := range crashes {
				leader := waitOneLeader(t, sc, live, 2*time.Minute)
				time.Sleep(300 * time.Millisecond) // let it work a little
				killed := time.Now()
				leader.Kill()
				live = slices.DeleteFunc(live, func(p *testenv.Controller) bool { return p == leader })
				live = append(live, env.Start(t, sc.bin, fmt.Sprintf("r%d", k+2), args...))
				waitOneLeader(t, sc, live, 2*time.Minute)
				takeovers = append(takeovers, time.Since(killed))
			}
			stop()
			<-l.done
			n := int(l.last.Load())
			settle := waitSettled(t, f, sc, n, 2*time.Minute)
			sc.invariant(f)
			slices.Sort(takeovers)
			report(t, fmt.Sprintf("crash during bursts (%d SIGKILLs of the leader, 2s Lease)", crashes), sc.name,
				fmt.Sprintf("0 duplicates; %d objects, %d load errors; takeover median %s, max %s; settled %s after the load",
					n+1, l.errors.Load(), takeovers[len(takeovers)/2].Round(time.Millisecond), takeovers[len(takeovers)-1].Round(time.Millisecond), settle.Round(time.Millisecond)))
		})
	}
}
