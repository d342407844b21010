package migration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// DrillEnv must be set for the drill to run (the Makefile's migration-drill target sets it).
const DrillEnv = "KCM_SPLIT_MIGRATION_DRILL"

var env *testenv.Env

// crdDir is where the chart ships the IPAddressPool CRD; the drill installs exactly that.
const crdDir = "../../../../charts/kcm-split/crds"

func TestMain(m *testing.M) {
	if os.Getenv(DrillEnv) == "" {
		// No control plane for a drill that will skip: `go test ./...` stays quick.
		os.Exit(m.Run())
	}
	testenv.MainWithOptions(m, &env, testenv.Options{Setup: func(e *testenv.Env) error { return testenv.InstallCRDs(e.Config, crdDir, poolGVR) }})
}

// TestMigrationDrill runs the naive switch, the Leader Migration switch and its rollback, and
// the take-over switch (--take-over-from-kcm) under churn, and asserts no two writers after
// each switch point and no lost work.
// Over 80 lines: the scenarios (naive, ordered switch, rollback, take-over) must run in order against one live control plane, one KCM set and one churn.
func TestMigrationDrill(t *testing.T) {
	if os.Getenv(DrillEnv) == "" {
		t.Skip("the migration drill takes minutes: run it with `make migration-drill` (sets " + DrillEnv + "=1)")
	}
	testenv.Require(t, env)
	began := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%6.1fs] %s", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	kcmBin, err := testenv.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	kcmBin = filepath.Join(kcmBin, "kube-controller-manager")
	if _, err := os.Stat(kcmBin); err != nil {
		t.Fatalf("%s: run `make tools`", kcmBin)
	}
	ours := ourBinaries()
	for _, b := range ours {
		b.bin.Path(t) // build before any clock starts
	}
	client := env.Client(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// The cluster as an operator runs it: KCM, two replicas, every controller on. Scenario C
	// shows them as static Pods on this host's Node (KCM names its host in its identity).
	cpNode := controlPlaneNode(t)
	nodes := &fakeNodes{c: client, silent: map[string]bool{}, renewed: map[string]time.Time{}, extra: []string{cpNode}}
	if err := setupChurn(ctx, client, dyn, nodes); err != nil {
		t.Fatal(err)
	}
	kcm := newKCMSet(t, kcmBin)
	kcm.startAll(t)
	logf("kube-controller-manager: 2 replicas up, every controller on")
	if err := createLongLivedQuotaPod(ctx, client); err != nil {
		t.Fatal(err)
	}
	renewCtx, stopRenew := context.WithCancel(ctx)
	defer stopRenew()
	go nodes.renew(renewCtx)

	churners := []*churner{endpointsChurner(client), nodeChurner(nodes), quotaChurner(client),
		namespaceChurner(client), serviceLBChurner(client), pvChurner(client)}
	lb := churners[4]
	// KCM runs no service-lb controller without a cloud provider: LoadBalancer Services are
	// churned only while kcm-split's runs, so servicelb's figures are its own (no handover).
	lb.paused.Store(true)
	churnCtx, stopChurn := context.WithCancel(ctx)
	for _, c := range churners {
		c.run(churnCtx, t)
	}
	defer func() {
		stopChurn()
		for _, c := range churners {
			<-c.done
		}
	}()
	caughtUp := func(what string) {
		t.Helper()
		since := time.Now()
		err := wait.PollUntilContextTimeout(ctx, pollEvery, effectTimeout+time.Minute, true, func(context.Context) (bool, error) {
			for _, c := range churners {
				if !c.caughtUp(since) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("%s: a controller's churn never caught up: %v", what, err)
		}
	}
	var windows []window
	phase := func(name string, body func()) window {
		w := window{name: name, start: time.Now()}
		logf("== %s", name)
		body()
		caughtUp(name)
		w.end = time.Now()
		windows = append(windows, w)
		logf("== %s done in %s", name, w.end.Sub(w.start).Round(time.Millisecond))
		return w
	}
	// finish runs the Leader Migration probe once every figure is taken and every end state
	// checked, then prints the last line (the Makefile prints it last).
	finish := func(last string) {
		verdict, detail := kcm.probeLeaderMigration(t, logf)
		logf("probe: kube-controller-manager with --enable-leader-migration, alone on its migration Lease: %s (%s)", verdict, detail)
		fmt.Printf("leader_migration_kcm=%s\n", verdict)
		fmt.Println(last)
	}

	phase("steady (KCM owns every controller)", func() { time.Sleep(15 * time.Second) })

	// Scenario A, the naive switch (the README before issue 31): KCM rolled with the
	// controllers off, then kcm-split started.
	naive := phase("naive switch", func() {
		kcm.roll(t, logf, controllersOff())
		for _, b := range ours {
			b.start(t)
		}
		for _, b := range ours {
			b.waitLogged(t, "Starting")
			logf("%s started (logged Starting)", b.bin.ID)
		}
		for _, b := range ours {
			b.c.WaitLeadingAndSynced(b.bin.Lease(), testenv.LeadTimeout)
			logf("%s leading and synced", b.bin.ID)
		}
		logf("kcm-split: all six leading and synced")
		lb.resume()
	})
	naiveSwitch := firstWrite(t, naive, ourWrite)

	// Back to KCM owning everything (naive too: unmeasured), as the next scenario starts.
	phase("reset to KCM", func() {
		lb.pause()
		for _, b := range ours {
			b.stop(t)
		}
		kcm.roll(t, logf, releaseGate)
		kcm.waitLeader(t)
	})

	if os.Getenv("KCM_SPLIT_MIGRATION_NAIVE_ONLY") != "" {
		finish(report(t, began, logf, churners, windows, naive, naiveSwitch, nil))
		return
	}

	// Scenario B, the ordered switch of the runbook (charts/kcm-split/README.md, "Moving from
	// kube-controller-manager"), then its rollback. KCM never gets a migration flag: v1.36.3
	// exits when it takes a migration Lease (the probe at the end says whether it still does).
	cKCM := writeMigrationConfig(t, "kube-controller-manager")
	cSplit := writeMigrationConfig(t, "kcm-split")
	migrationFlags := func(cfg string) []string {
		return []string{"--enable-leader-migration", "--leader-migration-config=" + cfg}
	}
	var steps []window
	step := func(name string, body func()) {
		w := window{name: name, start: time.Now()}
		logf("-- %s", name)
		body()
		w.end = time.Now()
		steps = append(steps, w)
	}
	// kcmStopped is B's switch point: the moment the last KCM process that ran the migrated
	// controllers (the replica leading before step 1, rolled last) had exited. It is taken
	// rather than KCM's last write in the audit log because it is the provable one: after the
	// exit that process cannot write, whereas its last write seen only says it did not happen
	// to write later, not that it could not. Every request it sent was received before the
	// exit, so KCM's in-flight writes fall before it, and our binaries, standing by, write
	// nothing until step 2, after it.
	var kcmStopped time.Time
	sw := phase("switch (runbook steps 0-2)", func() {
		step("0: kcm-split with C_kcm (standby)", func() {
			for _, b := range ours {
				b.start(t, migrationFlags(cKCM)...)
			}
			for _, b := range ours {
				b.waitPhase(t, "standby", time.Minute)
			}
		})
		step("1: KCM rolled to the controllers off (leader last)", func() {
			kcmStopped = kcm.roll(t, logf, controllersOff(), releaseGate)
			if kcmStopped.IsZero() {
				t.Fatal("step 1: no KCM replica led before the roll")
			}
			kcm.waitLeader(t)
		})
		step("2: kcm-split restarted with C_split (active)", func() {
			for _, b := range ours {
				b.stop(t)
				b.start(t, migrationFlags(cSplit)...)
				b.waitPhase(t, "active", 2*time.Minute)
				logf("%s active", b.bin.ID)
			}
			waitLease(t, "the migration Lease held by kcm-split", func(_, mig testenv.LeaseRecord) bool { return mig.Holder == "kcm-split" })
			lb.resume()
		})
	})
	// oursLeft is the rollback's switch point: the moment our last binary left phase active,
	// i.e. its process had exited (Stop returned) before its restart with C_kcm. A standby
	// writes nothing, so after it no kcm-split controller can write; KCM gets the controllers
	// back only in R2, after it.
	var oursLeft time.Time
	rb := phase("rollback (R1-R2)", func() {
		step("R1: kcm-split restarted with C_kcm (standby)", func() {
			// KCM runs no service-lb controller: its churn stops while ours still runs it,
			// the change in flight awaited.
			lb.pause()
			for _, b := range ours {
				b.stop(t)
				oursLeft = time.Now()
				b.start(t, migrationFlags(cKCM)...)
				b.waitPhase(t, "standby", time.Minute)
				logf("%s standby", b.bin.ID)
			}
		})
		step("R2: KCM rolled back to every controller on (leader last)", func() {
			kcm.roll(t, logf, releaseGate)
			kcm.waitLeader(t)
		})
	})
	// Scenario C, the switch without a second step (--take-over-from-kcm): KCM's replicas shown
	// as static Pods (their mirror Pods published as the kubelet does), the binaries restarted
	// with the flag wait while a Pod runs their controllers, and take over by themselves once
	// the roll turned them off everywhere.
	var kcmGone time.Time
	to := phase("take-over (--take-over-from-kcm)", func() {
		step("C0: KCM shown as static Pods; kcm-split restarted with --take-over-from-kcm (waiting)", func() {
			kcm.mirror(t, cpNode)
			for _, b := range ours {
				b.stop(t)
				b.start(t, "--take-over-from-kcm")
			}
			for _, b := range ours {
				b.waitTakeOver(t, "waiting", time.Minute)
			}
		})
		step("C1: KCM rolled to the controllers off (leader last); kcm-split takes over by itself", func() {
			kcmGone = kcm.roll(t, logf, controllersOff(), releaseGate)
			if kcmGone.IsZero() {
				t.Fatal("step C1: no KCM replica led before the roll")
			}
			for _, b := range ours {
				b.waitTakeOver(t, "active", 2*time.Minute)
				logf("%s took over", b.bin.ID)
			}
			lb.resume()
		})
	})
	sp := switchPoints{naive: naiveSwitch, b: kcmStopped, rollback: oursLeft, takeOver: kcmGone}
	windows = append(windows, steps...)
	last := report(t, began, logf, churners, windows, naive, naiveSwitch, &bResult{sw: sw, rb: rb, to: to, sp: sp})
	for _, b := range ours {
		b.stop(t)
	}
	finish(last)
}

// controlPlaneNode is the Node KCM's mirror Pods are on: this host's name, which KCM puts in
// its Lease identity, as a Node name.
func controlPlaneNode(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return strings.ToLower(h)
}

// waitLease waits until the main and migration Leases satisfy ok.
func waitLease(t *testing.T, what string, ok func(main, mig testenv.LeaseRecord) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return ok(env.LeaseHolder(t, "kube-system", kcmLease), env.LeaseHolder(t, "kube-system", migrationLease)), nil
	})
	if err != nil {
		t.Fatalf("never saw %s: main %+v, migration %+v", what, env.LeaseHolder(t, "kube-system", kcmLease), env.LeaseHolder(t, "kube-system", migrationLease))
	}
}

func sortByReceived(evs []testenv.AuditEvent) {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].RequestReceivedTimestamp.Before(evs[j].RequestReceivedTimestamp) })
}

// firstWrite is when the apiserver received the first write in w that keep keeps, or w's end.
func firstWrite(t *testing.T, w window, keep func(testenv.AuditEvent) bool) time.Time {
	t.Helper()
	evs, err := env.Writes(testenv.AuditEvent.Succeeded, testenv.ReceivedAfter(w.start), keep)
	if err != nil {
		t.Fatal(err)
	}
	sortByReceived(evs)
	if len(evs) == 0 || evs[0].RequestReceivedTimestamp.After(w.end) {
		return w.end
	}
	return evs[0].RequestReceivedTimestamp
}

type switchPoints struct{ naive, b, rollback, takeOver time.Time }

type bResult struct {
	sw, rb, to window
	sp         switchPoints
}

// overlap counts the objects written by both KCM's migrated controllers and kcm-split's
// controllers on the same side of the switch point at, within [from, to): two writers of one
// object at one time. Written means a successful write (a refused one changed nothing). Leases
// are left out: both sides write the migration Lease by design. KCM's in-flight writes count:
// a request KCM sent before it let go but the apiserver received after the switch point is a
// write after it.
func overlap(t *testing.T, from, at, to time.Time) (n int, examples []string, kcmAfter, oursBefore int) {
	t.Helper()
	evs, err := env.Writes(testenv.AuditEvent.Succeeded, testenv.ReceivedAfter(from), func(ev testenv.AuditEvent) bool {
		return ev.RequestReceivedTimestamp.Before(to) && ev.ObjectRef.Resource != "leases"
	})
	if err != nil {
		t.Fatal(err)
	}
	type sides struct{ kcm, ours bool }
	before, after := map[string]*sides{}, map[string]*sides{}
	for _, ev := range evs {
		k, o := kcmMigratedWrite(ev), ourWrite(ev)
		if !k && !o {
			continue
		}
		isAfter := !ev.RequestReceivedTimestamp.Before(at)
		m := before
		if isAfter {
			m = after
		}
		key := fmt.Sprintf("%s/%s %s/%s", ev.ObjectRef.APIGroup, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name)
		s := m[key]
		if s == nil {
			s = &sides{}
			m[key] = s
		}
		s.kcm = s.kcm || k
		s.ours = s.ours || o
		if k && isAfter {
			kcmAfter++
		}
		if o && !isAfter {
			oursBefore++
		}
	}
	for _, m := range []map[string]*sides{before, after} {
		for key, s := range m {
			if s.kcm && s.ours {
				n++
				examples = append(examples, key)
			}
		}
	}
	slices.Sort(examples)
	return n, examples, kcmAfter, oursBefore
}

// report prints the figures, asserts the invariants and returns the last line.
// Over 80 lines: the churn stopped first, then the gap table and each scenario's overlap; the last line needs the figures of every part.
func report(t *testing.T, began time.Time, logf func(string, ...any), churners []*churner, windows []window, naive window, naiveSwitch time.Time, b *bResult) string {
	t.Helper()
	// The churn stops; each loop's last change is awaited (bounded), then every end state is
	// checked.
	ctx := context.Background()
	lost := 0
	for _, c := range churners {
		c.pause()
		lost += c.lost()
		var what string
		err := wait.PollUntilContextTimeout(ctx, pollEvery, effectTimeout, true, func(ctx context.Context) (bool, error) {
			ok, w, err := c.final(ctx)
			what = w
			return ok && err == nil, nil
		})
		if err != nil {
			lost++
			t.Errorf("lost work: %s: end state not reached: %s", c.name, what)
		}
		if n := c.lost(); n > 0 {
			t.Errorf("lost work: %s: %d changes never had their effect", c.name, n)
		}
	}

	// Gaps: per controller and phase, the longest time a change waited for its effect.
	logf("longest time nothing acted on a change, per controller (s; changes covered):")
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "%-44s", "phase")
	for _, c := range churners {
		fmt.Fprintf(&hdr, " %16s", c.name)
	}
	logf("%s", hdr.String())
	// The maximum over the controllers KCM hands over: servicelb's figures are its own steady
	// state (KCM never ran it).
	gapMax := func(w window) float64 {
		worst := 0.0
		for _, c := range churners {
			if c.name == "servicelb" {
				continue
			}
			g, _ := c.gapIn(w)
			worst = max(worst, g.Seconds())
		}
		return worst
	}
	for _, w := range windows {
		var line strings.Builder
		fmt.Fprintf(&line, "%-44s", w.name)
		for _, c := range churners {
			g, n := c.gapIn(w)
			fmt.Fprintf(&line, " %10.2f (%3d)", g.Seconds(), n)
		}
		logf("%s", line.String())
	}
	for _, c := range churners {
		logf("churn %s: %d changes, %d step errors", c.name, len(c.snapshot()), c.errors.Load())
	}
	// The changes behind the figures: every one that waited more than the goal.
	for _, w := range windows {
		for _, c := range churners {
			for _, s := range c.slowIn(w, 2*time.Second) {
				seen := "never"
				if !s.seen.IsZero() {
					seen = fmt.Sprintf("after %.2fs", s.seen.Sub(s.at).Seconds())
				}
				logf("slow in %q: %s: %s at %s, effect %s", w.name, c.name, s.what, s.at.Format(time.StampMilli), seen)
			}
		}
	}

	nOverlap, ex, kcmAfter, oursBefore := overlap(t, naive.start, naiveSwitch, naive.end)
	logf("naive: switch point (first kcm-split write) %s; objects written by both sides: %d %v; KCM writes after it: %d", naiveSwitch.Format(time.StampMilli), nOverlap, ex, kcmAfter)
	_ = oursBefore
	if b == nil {
		logf("scenario B not run to its end (see above)")
		logf("run duration %s", time.Since(began).Round(time.Second))
		return fmt.Sprintf("migration: overlap=- gap_max_s=- lost=%d rollback_overlap=- rollback_gap_max_s=- naive_gap_max_s=%.1f", lost, gapMax(naive))
	}
	ov, ex, kcmAfter, oursBefore := overlap(t, b.sw.start, b.sp.b, b.rb.start)
	logf("switch: switch point %s (last KCM process running the migrated controllers exited); objects written by both sides: %d %v; KCM writes received after it: %d; kcm-split writes before it: %d",
		b.sp.b.Format(time.StampMilli), ov, ex, kcmAfter, oursBefore)
	if ov != 0 {
		t.Errorf("switch: %d objects written by both KCM and kcm-split on one side of the switch point: %v", ov, ex)
	}
	// Rollback: the roles swap (KCM is the new side).
	rov, rex, oursAfter, kcmBefore := overlapRollback(t, b.rb.start, b.sp.rollback, b.to.start)
	logf("rollback: switch point %s (last kcm-split binary left active); objects written by both sides: %d %v; kcm-split writes received after it: %d; KCM writes before it: %d",
		b.sp.rollback.Format(time.StampMilli), rov, rex, oursAfter, kcmBefore)
	if rov != 0 {
		t.Errorf("rollback: %d objects written by both KCM and kcm-split on one side of the switch point: %v", rov, rex)
	}
	tov, tex, kcmAfter, oursBefore := overlap(t, b.to.start, b.sp.takeOver, time.Now())
	logf("take-over: switch point %s (last KCM process running the controllers exited); objects written by both sides: %d %v; KCM writes received after it: %d; kcm-split writes before it: %d",
		b.sp.takeOver.Format(time.StampMilli), tov, tex, kcmAfter, oursBefore)
	if tov != 0 {
		t.Errorf("take-over: %d objects written by both KCM and kcm-split on one side of the switch point: %v", tov, tex)
	}
	logf("take-over: overlap=%d gap_max_s=%.1f", tov, gapMax(b.to))
	logf("run duration %s", time.Since(began).Round(time.Second))
	// The last line, exactly (stdout, without the test log's prefix; the Makefile prints it last).
	return fmt.Sprintf("migration: overlap=%d gap_max_s=%.1f lost=%d rollback_overlap=%d rollback_gap_max_s=%.1f naive_gap_max_s=%.1f",
		ov, gapMax(b.sw), lost, rov, gapMax(b.rb), gapMax(naive))
}

// overlapRollback is overlap for the rollback, where kcm-split is the old side: it also
// returns kcm-split's writes after the switch point and KCM's before it.
func overlapRollback(t *testing.T, from, at, to time.Time) (n int, examples []string, oursAfter, kcmBefore int) {
	t.Helper()
	n, examples, _, _ = overlap(t, from, at, to)
	evs, err := env.Writes(testenv.AuditEvent.Succeeded, testenv.ReceivedAfter(from), func(ev testenv.AuditEvent) bool {
		return ev.RequestReceivedTimestamp.Before(to) && ev.ObjectRef.Resource != "leases"
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		after := !ev.RequestReceivedTimestamp.Before(at)
		if ourWrite(ev) && after {
			oursAfter++
		}
		if kcmMigratedWrite(ev) && !after {
			kcmBefore++
		}
	}
	return n, examples, oursAfter, kcmBefore
}
