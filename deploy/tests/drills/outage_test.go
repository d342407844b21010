package drills

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// outageLength is the drill's apiserver outage: three times the default renew deadline, so
// every leader loses its Lease during it.
const outageLength = 30 * time.Second

// TestAPIServerOutage stops kube-apiserver for 30 s under all six binaries (default election
// timings), with one and with two replicas each. No process may exit; during the outage
// /readyz must say the apiserver is unreachable while /livez stays up; afterwards each
// binary has one leader again and its controller does its job (nothing lost).
// Over 80 lines: only the loop over the replica counts around the drill's subtest, which is itself over 80 lines (see there).
func TestAPIServerOutage(t *testing.T) {
	testenv.Require(t, env)
	for _, replicas := range []int{1, 2} {
		// Over 80 lines: one outage drill whose phases (start, probes during the outage, leaders after, work after) run in order against the same processes.
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			type member struct {
				sc    scenario
				f     *fixture
				procs []*testenv.Controller
				step  int
			}
			var members []*member
			for _, sc := range scenarios() {
				f := newFixture(t)
				sc.setup(f)
				m := &member{sc: sc, f: f}
				for r := range replicas {
					m.procs = append(m.procs, env.Start(t, sc.bin, fmt.Sprintf("%s-%d", sc.name, r), sc.args...))
				}
				members = append(members, m)
			}
			ctx := context.Background()
			for _, m := range members {
				waitOneLeader(t, m.sc, m.procs, 2*time.Minute)
				for ; m.step < 3; m.step++ {
					if err := m.sc.step(ctx, m.f, m.step); err != nil {
						t.Fatal(err)
					}
				}
				waitSettled(t, m.f, m.sc, m.step-1, time.Minute)
			}

			// Probe every process during the outage.
			type probes struct {
				mu            sync.Mutex
				unready       time.Duration // first /readyz naming the apiserver, since the outage began
				livezFailures int
			}
			seen := map[*testenv.Controller]*probes{}
			var all []*testenv.Controller
			for _, m := range members {
				for _, p := range m.procs {
					seen[p] = &probes{unready: -1}
					all = append(all, p)
				}
			}
			pctx, stopProbes := context.WithCancel(ctx)
			var wg sync.WaitGroup
			start := time.Now()
			for _, p := range all {
				wg.Go(func() {
					pr := seen[p]
					for pctx.Err() == nil {
						code, body := p.Get("/readyz?verbose")
						if code != http.StatusOK && strings.Contains(body, "apiserver") && strings.Contains(body, "unreachable") {
							pr.mu.Lock()
							if pr.unready < 0 {
								pr.unready = time.Since(start)
							}
							pr.mu.Unlock()
						}
						if code, _ := p.Get("/livez"); code != http.StatusOK {
							pr.mu.Lock()
							pr.livezFailures++
							pr.mu.Unlock()
						}
						select {
						case <-pctx.Done():
						case <-time.After(500 * time.Millisecond):
						}
					}
				})
			}
			env.StopAPIServer(t)
			time.Sleep(outageLength)
			stopProbes()
			wg.Wait()
			env.StartAPIServer(t)
			back := time.Now()

			for _, p := range all {
				pr := seen[p]
				if p.Exited() {
					t.Errorf("%s exited (%d) during the outage", p.Name, p.ExitCode())
				}
				if pr.unready < 0 {
					t.Errorf("%s: /readyz never reported the apiserver unreachable during a %s outage", p.Name, outageLength)
				}
				if pr.livezFailures > 0 {
					t.Errorf("%s: /livez failed %d times during the outage (a restart cannot help)", p.Name, pr.livezFailures)
				}
			}
			// Leaders first, all of them polled together, so that each time is its own.
			leaders := map[*member]*testenv.Controller{}
			leadAfter := map[*member]time.Duration{}
			err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
				for _, m := range members {
					if leaders[m] != nil {
						continue
					}
					if p := oneLeader(t, m.sc, m.procs); p != nil {
						leaders[m], leadAfter[m] = p, time.Since(back)
					}
				}
				return len(leaders) == len(members), nil
			})
			if err != nil {
				t.Fatalf("not every binary has one leader 2 minutes after the outage: %v", err)
			}
			for _, m := range members {
				leader, lead := leaders[m], leadAfter[m]
				from := m.step
				for ; m.step < from+3; m.step++ {
					if err := m.sc.step(ctx, m.f, m.step); err != nil {
						t.Fatalf("%s: step after the outage: %v", m.sc.name, err)
					}
				}
				waitSettled(t, m.f, m.sc, m.step-1, 2*time.Minute)
				correct := time.Since(back)
				m.sc.invariant(m.f)
				var unready []string
				for _, p := range m.procs {
					unready = append(unready, seen[p].unready.Round(time.Second).String())
				}
				restarts := 0
				for _, p := range m.procs {
					if p.Exited() {
						restarts++
					}
				}
				report(t, fmt.Sprintf("apiserver down %s, %d replica(s)", outageLength, replicas), m.sc.name,
					fmt.Sprintf("%d exits; /readyz unready after %s; one leader (%s) %s after the apiserver was back; state correct after %s (one binary after another)",
						restarts, strings.Join(unready, "/"), leader.Name, lead.Round(time.Millisecond), correct.Round(time.Millisecond)))
			}
		})
	}
}

// oneLeader returns the one process of procs that reports leading sc's Lease while the Lease
// names it, or nil.
func oneLeader(t *testing.T, sc scenario, procs []*testenv.Controller) *testenv.Controller {
	holder := env.LeaseHolder(t, "kube-system", sc.bin.Lease()).Holder
	var leader *testenv.Controller
	n := 0
	for _, p := range procs {
		if p.IsLeader(sc.bin.Lease()) {
			n++
			if p.Identity() == holder {
				leader = p
			}
		}
	}
	if n != 1 {
		return nil
	}
	return leader
}

// waitOneLeader waits until oneLeader finds the leader, and returns it.
func waitOneLeader(t *testing.T, sc scenario, procs []*testenv.Controller, timeout time.Duration) *testenv.Controller {
	t.Helper()
	var leader *testenv.Controller
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		leader = oneLeader(t, sc, procs)
		return leader != nil, nil
	})
	if err != nil {
		t.Fatalf("%s: no single leader within %s: %v", sc.name, timeout, err)
	}
	return leader
}
