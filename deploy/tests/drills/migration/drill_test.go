package migration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kcm-split/kcm-split/deploy/tests/drills/churn"
	"github.com/kcm-split/kcm-split/deploy/tests/drills/handover"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// DrillEnv must be set for the drill to run (the Makefile's migration-drill target sets it).
const DrillEnv = "KCM_SPLIT_MIGRATION_DRILL"

var env *testenv.Env

// effectTimeout bounds the wait for each change's effect: past it the change is lost work.
const effectTimeout = 3 * time.Minute

// poolGVR is the chart's address pool, which the servicelb churn needs.
var poolGVR = churn.PoolGVR

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
	ch, err := churn.New(churn.Config{Client: client, Dynamic: dyn, Prefix: "mig", NodeGrace: nodeGrace,
		ExtraNodes: []string{cpNode}, EffectTimeout: effectTimeout, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	kcm := newKCMSet(t, kcmBin)
	kcm.startAll(t)
	logf("kube-controller-manager: 2 replicas up, every controller on")
	// KCM runs no service-lb controller without a cloud provider: LoadBalancer Services are
	// churned only while kcm-split's runs, so servicelb's figures are its own (no handover).
	ch.Pause(churn.ServiceLB)
	if err := ch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	phases := ch.Phases(effectTimeout+time.Minute, logf)
	phase := func(name string, body func()) churn.Window { t.Helper(); return phases.Run(ctx, t, name, body) }
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
		ch.Resume(churn.ServiceLB)
	})
	naiveSwitch := firstWrite(t, naive, ourWrite)

	// Back to KCM owning everything (naive too: unmeasured), as the next scenario starts.
	phase("reset to KCM", func() {
		ch.Pause(churn.ServiceLB)
		for _, b := range ours {
			b.stop(t)
		}
		kcm.roll(t, logf, releaseGate)
		kcm.waitLeader(t)
	})

	if os.Getenv("KCM_SPLIT_MIGRATION_NAIVE_ONLY") != "" {
		finish(report(t, began, logf, ch, phases.Windows, naive, naiveSwitch, nil))
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
	var steps []churn.Window
	step := func(name string, body func()) {
		w := churn.Window{Name: name, Start: time.Now()}
		logf("-- %s", name)
		body()
		w.End = time.Now()
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
			ch.Resume(churn.ServiceLB)
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
			ch.Pause(churn.ServiceLB)
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
			ch.Resume(churn.ServiceLB)
		})
	})
	sp := switchPoints{naive: naiveSwitch, b: kcmStopped, rollback: oursLeft, takeOver: kcmGone}
	windows := slices.Concat(phases.Windows, steps)
	last := report(t, began, logf, ch, windows, naive, naiveSwitch, &bResult{sw: sw, rb: rb, to: to, sp: sp})
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

// writes are the successful writes the apiserver received after from.
func writes(t *testing.T, from time.Time) []testenv.AuditEvent {
	t.Helper()
	evs, err := env.Writes(testenv.AuditEvent.Succeeded, testenv.ReceivedAfter(from))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// firstWrite is when the apiserver received the first write in w that keep keeps, or w's end.
func firstWrite(t *testing.T, w churn.Window, keep func(testenv.AuditEvent) bool) time.Time {
	t.Helper()
	if at, ok := handover.FirstWrite(writes(t, w.Start), handover.Term{From: w.Start, To: w.End}, keep); ok {
		return at
	}
	return w.End
}

type switchPoints struct{ naive, b, rollback, takeOver time.Time }

type bResult struct {
	sw, rb, to churn.Window
	sp         switchPoints
}

// overlap finds the objects written by both the old side's writers and the new side's on the
// same side of the switch point at, within [from, to): two writers of one object at one time.
// Written means a successful write (a refused one changed nothing). Leases are left out: both
// sides write the migration Lease by design. The old side's in-flight writes count: a request
// it sent before it let go but the apiserver received after the switch point is a write after
// it. In handover's terms the old side's term ends at the switch point and the new side's
// begins there: OutOfTermA are the old side's writes after it, OutOfTermB the new side's
// before it.
func overlap(t *testing.T, from, at, to time.Time, old, nu func(testenv.AuditEvent) bool) handover.Result {
	t.Helper()
	evs := testenv.Filter(writes(t, from), func(ev testenv.AuditEvent) bool {
		return ev.RequestReceivedTimestamp.Before(to) && ev.ObjectRef.Resource != "leases"
	})
	return handover.TwoWriters(evs,
		handover.Side{Name: "old", Writes: old, Terms: []handover.Term{{From: from, To: at}}},
		handover.Side{Name: "new", Writes: nu, Terms: []handover.Term{{From: at, To: to}}})
}

// report prints the figures, asserts the invariants and returns the last line.
// Over 80 lines: the churn stopped first, then the gap table and each scenario's overlap; the last line needs the figures of every part.
func report(t *testing.T, began time.Time, logf func(string, ...any), ch *churn.Churn, windows []churn.Window, naive churn.Window, naiveSwitch time.Time, b *bResult) string {
	t.Helper()
	// The churn stops; each loop's last change is awaited (bounded), then every end state is
	// checked.
	rep := ch.Stop(context.Background())
	for _, cr := range rep.Controllers {
		if !cr.EndStateOK {
			t.Errorf("lost work: %s: end state not reached: %s", cr.Name, cr.EndState)
		}
		if cr.Lost > 0 {
			t.Errorf("lost work: %s: %d changes never had their effect", cr.Name, cr.Lost)
		}
	}
	lost := rep.Lost()
	if thin := rep.Thin(3); len(thin) > 0 {
		t.Errorf("the churn did not exercise %v: \"0 lost\" proves nothing for them", thin)
	}

	// Gaps: per controller and phase, the longest time a change waited for its effect.
	for _, line := range ch.GapTable(windows) {
		logf("%s", line)
	}
	// The maximum over the controllers KCM hands over: servicelb's figures are its own steady
	// state (KCM never ran it).
	gapMax := func(w churn.Window) float64 { return ch.GapMax(w, churn.ServiceLB).Seconds() }
	for _, cr := range rep.Controllers {
		logf("churn %s: %d changes, %d step errors", cr.Name, cr.Changes, cr.StepErrors)
	}
	// The changes behind the figures: every one that waited more than the goal.
	for _, line := range ch.SlowChanges(windows, 2*time.Second) {
		logf("%s", line)
	}

	res := overlap(t, naive.Start, naiveSwitch, naive.End, kcmMigratedWrite, ourWrite)
	logf("naive: switch point (first kcm-split write) %s; objects written by both sides: %d %v; KCM writes after it: %d",
		naiveSwitch.Format(time.StampMilli), len(res.TwoWriters), res.Objects(), len(res.OutOfTermA))
	if b == nil {
		logf("scenario B not run to its end (see above)")
		logf("run duration %s", time.Since(began).Round(time.Second))
		return fmt.Sprintf("migration: overlap=- gap_max_s=- lost=%d rollback_overlap=- rollback_gap_max_s=- naive_gap_max_s=%.1f", lost, gapMax(naive))
	}
	res = overlap(t, b.sw.Start, b.sp.b, b.rb.Start, kcmMigratedWrite, ourWrite)
	ov := len(res.TwoWriters)
	logf("switch: switch point %s (last KCM process running the migrated controllers exited); objects written by both sides: %d %v; KCM writes received after it: %d; kcm-split writes before it: %d",
		b.sp.b.Format(time.StampMilli), ov, res.Objects(), len(res.OutOfTermA), len(res.OutOfTermB))
	if ov != 0 {
		t.Errorf("switch: %d objects written by both KCM and kcm-split on one side of the switch point: %v", ov, res.Examples(-1))
	}
	// Rollback: the roles swap (KCM is the new side).
	res = overlap(t, b.rb.Start, b.sp.rollback, b.to.Start, ourWrite, kcmMigratedWrite)
	rov := len(res.TwoWriters)
	logf("rollback: switch point %s (last kcm-split binary left active); objects written by both sides: %d %v; kcm-split writes received after it: %d; KCM writes before it: %d",
		b.sp.rollback.Format(time.StampMilli), rov, res.Objects(), len(res.OutOfTermA), len(res.OutOfTermB))
	if rov != 0 {
		t.Errorf("rollback: %d objects written by both KCM and kcm-split on one side of the switch point: %v", rov, res.Examples(-1))
	}
	res = overlap(t, b.to.Start, b.sp.takeOver, time.Now(), kcmMigratedWrite, ourWrite)
	tov := len(res.TwoWriters)
	logf("take-over: switch point %s (last KCM process running the controllers exited); objects written by both sides: %d %v; KCM writes received after it: %d; kcm-split writes before it: %d",
		b.sp.takeOver.Format(time.StampMilli), tov, res.Objects(), len(res.OutOfTermA), len(res.OutOfTermB))
	if tov != 0 {
		t.Errorf("take-over: %d objects written by both KCM and kcm-split on one side of the switch point: %v", tov, res.Examples(-1))
	}
	logf("take-over: overlap=%d gap_max_s=%.1f", tov, gapMax(b.to))
	logf("run duration %s", time.Since(began).Round(time.Second))
	// The last line, exactly (stdout, without the test log's prefix; the Makefile prints it last).
	return fmt.Sprintf("migration: overlap=%d gap_max_s=%.1f lost=%d rollback_overlap=%d rollback_gap_max_s=%.1f naive_gap_max_s=%.1f",
		ov, gapMax(b.sw), lost, rov, gapMax(b.rb), gapMax(naive))
}
