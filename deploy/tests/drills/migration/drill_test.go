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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// DrillEnv must be set for the drill to run (the Makefile's migration-drill target sets it).
const DrillEnv = "KCM_SPLIT_MIGRATION_DRILL"

var env *testenv.Env

func TestMain(m *testing.M) {
	if os.Getenv(DrillEnv) == "" {
		// No control plane for a drill that will skip: `go test ./...` stays quick.
		os.Exit(m.Run())
	}
	testenv.MainWithOptions(m, &env, testenv.Options{Setup: func(e *testenv.Env) error { return installPoolCRD(e) }})
}

// TestMigrationDrill runs the naive switch, the Leader Migration switch and its rollback under
// churn, and asserts no two writers after each switch point and no lost work.
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

	// The cluster as an operator runs it: KCM, two replicas, every controller on.
	nodes := &fakeNodes{c: client, silent: map[string]bool{}, renewed: map[string]time.Time{}}
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
	// blocker, when set, says why the runbook could not go on: the drill then gives KCM the
	// controllers back (so that nothing is lost), fails, and still reports the baseline.
	var blocker string
	phase := func(name string, body func()) window {
		w := window{name: name, start: time.Now()}
		logf("== %s", name)
		body()
		if blocker != "" {
			logf("== %s blocked: %s", name, blocker)
			w.end = time.Now()
			windows = append(windows, w)
			return w
		}
		caughtUp(name)
		w.end = time.Now()
		windows = append(windows, w)
		logf("== %s done in %s", name, w.end.Sub(w.start).Round(time.Millisecond))
		return w
	}

	phase("steady (KCM owns every controller)", func() { time.Sleep(15 * time.Second) })

	// Scenario A, the naive switch (the README today): KCM rolled with the controllers off,
	// then kcm-split started.
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
		kcm.roll(t, logf)
		kcm.waitLeader(t)
	})

	if os.Getenv("KCM_SPLIT_MIGRATION_NAIVE_ONLY") != "" {
		report(t, began, logf, churners, windows, naive, naiveSwitch, nil)
		return
	}

	// Scenario B, the switch per the runbook (steps 0-3), then the rollback (R1-R3).
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
	sw := phase("switch (runbook steps 0-3)", func() {
		step("0: kcm-split with C_kcm (standby)", func() {
			for _, b := range ours {
				b.start(t, migrationFlags(cKCM)...)
			}
			for _, b := range ours {
				b.waitPhase(t, "standby", time.Minute)
			}
		})
		step("1: KCM rolled to C_kcm (+ release gate)", func() {
			kcm.roll(t, logf, append(migrationFlags(cKCM), releaseGate)...)
			// Check: the migration Lease exists, held by the main leader, and that leader runs
			// the migrated controllers and stays up doing so (its final state, not the instant
			// it took the Lease).
			waitLease(t, "the migration Lease held by KCM's leader", func(main, mig testenv.LeaseRecord) bool {
				return mig.Holder != "" && mig.Holder == main.Holder
			})
			blocker = kcm.settledOnMigration(t)
		})
		if blocker != "" {
			return
		}
		step("2: kcm-split rolled to C_split (waiting)", func() {
			for _, b := range ours {
				b.stop(t)
				b.start(t, migrationFlags(cSplit)...)
				b.waitPhase(t, "waiting", time.Minute)
			}
		})
		step("3: KCM rolled to the controllers off, no migration", func() {
			kcm.roll(t, logf, controllersOff(), releaseGate)
			for _, b := range ours {
				b.waitPhase(t, "active", 2*time.Minute)
			}
			waitLease(t, "the migration Lease held by kcm-split", func(_, mig testenv.LeaseRecord) bool { return mig.Holder == "kcm-split" })
			lb.resume()
		})
	})
	if blocker != "" {
		t.Errorf("the runbook cannot go on: %s", blocker)
		blocker = "" // the restore is awaited like any phase
		phase("restore (KCM owns every controller again, no migration)", func() {
			for _, b := range ours {
				b.stop(t)
			}
			kcm.roll(t, logf)
			kcm.waitLeader(t)
		})
		windows = append(windows, steps...)
		report(t, began, logf, churners, windows, naive, naiveSwitch, nil)
		return
	}
	rb := phase("rollback (R1-R3)", func() {
		step("R1: KCM rolled back to C_kcm, controllers on", func() {
			kcm.roll(t, logf, append(migrationFlags(cKCM), releaseGate)...)
			kcm.waitLeader(t)
		})
		step("R2: hand-back annotation", func() {
			lb.pause()
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, handBack)
			if _, err := client.CoordinationV1().Leases("kube-system").Patch(ctx, migrationLease, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			waitLease(t, "the migration Lease back with KCM's leader", func(main, mig testenv.LeaseRecord) bool {
				return mig.Holder != "" && mig.Holder == main.Holder
			})
			if b := kcm.settledOnMigration(t); b != "" {
				t.Errorf("R2: %s", b)
			}
		})
		step("R3: kcm-split removed", func() {
			for _, b := range ours {
				b.stop(t)
			}
		})
	})
	sp := switchPoints{naive: naiveSwitch,
		b:        leaseHandover(t, sw.start, rb.start, isOurs, "kube-controller-manager -> kcm-split"),
		rollback: leaseHandover(t, rb.start, time.Now(), isKCM, "kcm-split -> kube-controller-manager"),
	}
	windows = append(windows, steps...)
	report(t, began, logf, churners, windows, naive, naiveSwitch, &bResult{sw: sw, rb: rb, sp: sp})
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

func isKCM(ev testenv.AuditEvent) bool {
	return strings.HasPrefix(ev.UserAgent, "kube-controller-manager/")
}

// leaseHandover finds a switch point: the moment the migration Lease changed hands to the
// side newSide tells, within [from, to). It is the time the apiserver received the first
// successful write to the Lease by the new side after the last successful write by the old
// one (the old side's release, or its last renewal): from then on the new side holds it. A
// not-yet-rolled replica that won the Lease back in between would move the point later.
func leaseHandover(t *testing.T, from, to time.Time, newSide func(testenv.AuditEvent) bool, what string) time.Time {
	t.Helper()
	evs, err := env.Writes(testenv.AuditEvent.Succeeded, testenv.ReceivedAfter(from), func(ev testenv.AuditEvent) bool {
		return ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Namespace == "kube-system" && ev.ObjectRef.Name == migrationLease &&
			ev.RequestReceivedTimestamp.Before(to)
	})
	if err != nil {
		t.Fatal(err)
	}
	sortByReceived(evs)
	lastOld := -1
	for i, ev := range evs {
		if !newSide(ev) {
			lastOld = i
		}
	}
	for _, ev := range evs[lastOld+1:] {
		if newSide(ev) {
			return ev.RequestReceivedTimestamp
		}
	}
	t.Fatalf("the migration Lease never changed hands %s between %s and %s (%d writes)", what, from.Format(time.StampMilli), to.Format(time.StampMilli), len(evs))
	return time.Time{}
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

type switchPoints struct{ naive, b, rollback time.Time }

type bResult struct {
	sw, rb window
	sp     switchPoints
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

// report prints the figures, asserts the invariants and prints the last line.
func report(t *testing.T, began time.Time, logf func(string, ...any), churners []*churner, windows []window, naive window, naiveSwitch time.Time, b *bResult) {
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
	gapMax := func(w window) float64 {
		worst := 0.0
		for _, c := range churners {
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
		fmt.Printf("migration: overlap=- gap_max_s=- lost=%d rollback_overlap=- rollback_gap_max_s=- naive_gap_max_s=%.1f\n", lost, gapMax(naive))
		return
	}
	ov, ex, kcmAfter, oursBefore := overlap(t, b.sw.start, b.sp.b, b.rb.start)
	logf("switch: switch point %s (migration Lease to kcm-split); objects written by both sides: %d %v; KCM writes received after it: %d; kcm-split writes before it: %d",
		b.sp.b.Format(time.StampMilli), ov, ex, kcmAfter, oursBefore)
	if ov != 0 {
		t.Errorf("switch: %d objects written by both KCM and kcm-split on one side of the switch point: %v", ov, ex)
	}
	// Rollback: the roles swap (KCM is the new side).
	rov, rex, oursAfter, kcmBefore := overlapRollback(t, b.rb.start, b.sp.rollback, time.Now())
	logf("rollback: switch point %s (migration Lease back to KCM); objects written by both sides: %d %v; kcm-split writes received after it: %d; KCM writes before it: %d",
		b.sp.rollback.Format(time.StampMilli), rov, rex, oursAfter, kcmBefore)
	if rov != 0 {
		t.Errorf("rollback: %d objects written by both KCM and kcm-split on one side of the switch point: %v", rov, rex)
	}
	logf("run duration %s", time.Since(began).Round(time.Second))
	// The last line, exactly (stdout, without the test log's prefix; the Makefile prints it last).
	fmt.Printf("migration: overlap=%d gap_max_s=%.1f lost=%d rollback_overlap=%d rollback_gap_max_s=%.1f naive_gap_max_s=%.1f\n",
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

// installPoolCRD installs the chart's IPAddressPool CRD and waits until it is served.
func installPoolCRD(e *testenv.Env) error {
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "charts", "kcm-split", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs found: %v", err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	ctx := context.Background()
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if _, err := dyn.Resource(crds).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(e.Config)
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := dc.ServerResourcesForGroupVersion(poolGVR.GroupVersion().String())
		return err == nil, nil
	})
}
